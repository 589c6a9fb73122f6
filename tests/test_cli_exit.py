"""The ``proxyfleet`` program ends without a last walk of its heap (docs/performance.md, 2a)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.cli import command, main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fleet-repo"


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_the_program_freezes_what_the_command_built_so_the_exit_does_not_walk_it() -> None:
    assert gc.get_freeze_count() == 0
    code = command(["validate", str(EXAMPLE)])
    assert code == 0
    assert gc.get_freeze_count() > 0


@pytest.mark.usefixtures("unfrozen")
def test_main_as_tests_call_it_leaves_the_collector_alone() -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    assert gc.get_freeze_count() == 0
