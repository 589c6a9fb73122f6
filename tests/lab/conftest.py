"""Fixtures for tests against the lab: namespaced hypervisors brought up by ``python -m lab``.

Every test in this directory is marked ``lab``. The lab needs root; it is started by the
fixtures (never by hand) and taken down again at the end of the session.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from labutil import lab_cli

from lab import config as lab_config


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.lab)


@pytest.fixture(scope="session")
def lab_session() -> Iterator[None]:
    """The image, built or reused, once per session; the lab goes down when the session ends."""
    lab_cli("image", timeout=3600)
    yield
    lab_cli("down")


@pytest.fixture(scope="module")
def lab(lab_session: None, request: pytest.FixtureRequest) -> dict[str, Any]:
    """A lab of the module's ``LAB_HOSTS`` hosts (default 2), the last ``LAB_DEBIAN13`` of
    them (default 0) Debian 13 hosts; lab.json's content. ``up`` is idempotent and cheap when
    the lab already runs, brings it back if a test (test_lab_hosts) took it down, removes
    hosts beyond the count and rebuilds a host whose kind changed."""
    count = str(getattr(request.module, "LAB_HOSTS", 2))
    debian13 = str(getattr(request.module, "LAB_DEBIAN13", 0))
    lab_cli("up", "--hosts", count, "--debian13", debian13, timeout=3600)
    return dict(json.loads((lab_config.STATE / "lab.json").read_text()))
