"""The daemon's cycle reads its repo once: the load that names the fleet (the lock's name) is
the engine's, with the engine's read limits, as ``apply``'s (tests/test_cli_apply_load.py)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from enginefakes import FleetRepo
from loadcount import count_loads

from reconciler.adapters.coordination.fakelock import FakeLockBackend, FakeLocks
from reconciler.adapters.git.fakesource import FakeSource
from reconciler.core.load.repofiles import ReadLimits
from reconciler.engine.cycle import source_cycle
from reconciler.engine.leadership import Leadership
from reconciler.model.coordination import Holder
from reconciler.model.report import RunResult


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every load of a repo by the cycle, the engine or the leadership's fleet_id, by root."""
    return count_loads(monkeypatch)


def daemon_cycle(world: FleetRepo) -> Any:
    leadership = Leadership(FakeLocks(FakeLockBackend(), Holder("box", 100, "daemon")), poll=0.05)
    engine = world.engine
    return source_cycle(
        FakeSource(world.root, revision="a" * 40),
        lambda root, rev, *, loaded: engine.reconcile_once(root, revision=rev, loaded=loaded),
        leadership=leadership,
        load=engine.load,
    )


def test_a_daemon_cycle_loads_its_repo_once_and_claims_the_fleet_it_names(
    tmp_path: Path, loads: list[Path]
) -> None:
    world = FleetRepo(tmp_path)

    report = daemon_cycle(world)(threading.Event())

    assert report is not None and report.result is RunResult.SUCCESS, report
    assert loads == [tmp_path]


def test_a_repo_past_the_engines_read_limits_is_stalled_after_one_bounded_load(
    tmp_path: Path, loads: list[Path]
) -> None:
    world = FleetRepo(tmp_path)
    world.engine.read_limits = ReadLimits(max_file_bytes=100)

    report = daemon_cycle(world)(threading.Event())

    assert report is not None and report.result is RunResult.STALLED
    assert any("larger than the limit of 100 bytes" in p for p in report.problems), report.problems
    assert loads == [tmp_path]
    assert world.mutating_calls() == [] and world.made == []


def test_a_cycle_with_leadership_and_nothing_to_name_its_lock_is_refused_when_built(
    tmp_path: Path,
) -> None:
    leadership = Leadership(FakeLocks(FakeLockBackend(), Holder("box", 100, "daemon")), poll=0.05)

    with pytest.raises(ValueError, match="needs fleet, load or fleet_of"):
        source_cycle(FakeSource(tmp_path), lambda root, rev: None, leadership=leadership)
