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
from labutil import ROOT, lab_cli


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.lab)


@pytest.fixture(scope="session")
def lab() -> Iterator[dict[str, Any]]:
    """A 2-host lab (and the image, built or reused); lab.json's content. Down afterwards."""
    lab_cli("up", "--hosts", "2")
    lab_cli("image", timeout=3600)
    yield json.loads((ROOT / "lab" / "state" / "lab.json").read_text())
    lab_cli("down")
