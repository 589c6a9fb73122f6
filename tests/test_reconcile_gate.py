"""The gate of a reconcile: hosts dial first, then ``gate`` runs, then they are observed."""

from __future__ import annotations

from pathlib import Path

import pytest
from enginefakes import FleetRepo as Fleet

from reconciler.adapters.hypervisor.fakehost import Call
from reconciler.engine.reconcile import Prepared
from reconciler.model.report import RunReport, RunResult


class Refused(Exception):
    pass


def test_the_gate_runs_once_every_host_dials_and_before_any_is_observed(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path)
    seen: list[list[tuple[int, list[Call]]]] = []

    def gate() -> None:
        seen.append([(h.dialled_ahead, list(h.calls)) for h in fleet.hosts.values()])

    prepared = fleet.engine.prepare(fleet.root, revision="rev1", gate=gate)

    assert isinstance(prepared, Prepared)
    assert seen == [[(1, []), (1, [])]]
    assert all(Call("observe") in h.calls for h in fleet.hosts.values())


def test_a_gate_that_refuses_leaves_every_host_unobserved(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path)

    def gate() -> None:
        raise Refused

    with pytest.raises(Refused):
        fleet.engine.prepare(fleet.root, revision="rev1", gate=gate)

    assert all(h.calls == [] for h in fleet.hosts.values())


def test_a_repo_that_does_not_load_reaches_neither_the_gate_nor_a_host(tmp_path: Path) -> None:
    fleet = Fleet(tmp_path)
    fleet.write(("kvm01",), ("web-1",), extra="---\nkind: Proxy\nmetadata: {name: Bad_Name}\n")
    gated: list[bool] = []

    prepared = fleet.engine.prepare(fleet.root, revision="rev1", gate=lambda: gated.append(True))

    assert isinstance(prepared, RunReport)
    assert prepared.result is RunResult.STALLED
    assert gated == []
    assert all(h.dialled_ahead == 0 and h.calls == [] for h in fleet.hosts.values())
