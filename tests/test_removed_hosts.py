"""A host removed from fleet.yaml while the fleet's last status shows VMs on it (issue 43).

The engine reads the status the daemon last committed (status.yaml on the status
branch: every box reads the same one, and it outlives an upgrade); here it is built
from the engine's own report, as the status writer builds it.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import pytest
from enginefakes import FleetRepo
from gitutil import make_remote

from reconciler.adapters.git.fakesource import FakeSource
from reconciler.adapters.git.fleetrevision import last_status
from reconciler.adapters.git.statuswriter import GitStatusWriter
from reconciler.cli import apply, build_parser, plan
from reconciler.cli.applyengine import Started
from reconciler.core.status import statusdoc
from reconciler.engine.daemon import source_cycle
from reconciler.model.report import RunReport, RunResult
from reconciler.model.settings import RepoSettings, StatusSettings

BOTH = ("kvm01", "kvm02")
PROXIES = ("web-1", "web-2", "web-3")


def status_of(report: RunReport) -> dict[str, Any]:
    """status.yaml as the daemon would commit it after ``report``, read back."""
    doc = statusdoc.parse_yaml(statusdoc.dump_yaml(statusdoc.build(report, None, runs=())))
    assert doc is not None
    return doc


def owned_on(world: FleetRepo, host: str) -> list[str]:
    return sorted(d.name for d in world.hosts[host].domains.values() if d.owner is not None)


def stalled(report: RunReport) -> tuple[str, str]:
    (condition,) = [c for c in report.conditions if c.type == "Stalled" and c.status]
    return condition.reason, condition.message


def removed_after_a_run(tmp_path: Path) -> tuple[FleetRepo, dict[str, Any]]:
    """A fleet run over both hosts, its status kept, then kvm02 dropped from fleet.yaml."""
    world = FleetRepo(tmp_path)
    report = world.cycle()
    assert report.result is RunResult.SUCCESS and owned_on(world, "kvm02")
    last = status_of(report)
    world.engine.last_status = lambda root: last
    world.write(("kvm01",), PROXIES)
    world.forget_calls()
    return world, last


def test_a_host_removed_while_the_status_shows_vms_on_it_is_refused_naming_them(
    tmp_path: Path,
) -> None:
    world, _ = removed_after_a_run(tmp_path)
    on_kvm02 = owned_on(world, "kvm02")

    report = world.cycle("rev2")

    assert report.result is RunResult.STALLED
    assert stalled(report)[0] == "HostRemovedWithVms"
    (problem,) = report.problems
    assert problem.startswith("fleet.yaml: spec.hosts: host kvm02 is no longer listed but ")
    assert f"shows {len(on_kvm02)} VM(s) of the fleet on it ({', '.join(on_kvm02)})" in problem
    assert "Keep the host with state: draining until the status reports it empty" in problem
    assert world.mutating_calls() == []  # nothing deleted, nothing created elsewhere
    assert owned_on(world, "kvm02") == on_kvm02


def test_a_refused_removal_keeps_the_accepted_revision_healing_the_rest_of_the_fleet(
    tmp_path: Path,
) -> None:
    world = FleetRepo(tmp_path)
    source = FakeSource(tmp_path, revision="a" * 40)
    engine = world.engine
    cycle = source_cycle(
        source,
        lambda root, rev, *, loaded: engine.reconcile_once(root, revision=rev, loaded=loaded),
        load=engine.load,
    )
    first = cycle(world.stop)
    assert first is not None and first.result is RunResult.SUCCESS
    last = status_of(first)
    engine.last_status = lambda root: last
    on_kvm02 = owned_on(world, "kvm02")
    lost = owned_on(world, "kvm01")[0]
    del world.hosts["kvm01"].domains[lost]  # the rest of the fleet needs healing
    world.write(("kvm01",), PROXIES)
    source.revision = "b" * 40
    world.forget_calls()

    report = cycle(world.stop)

    assert report is not None and report.result is not RunResult.FAILED, report.problems
    assert report.revision == "a" * 40 and report.refused == "b" * 40
    reason, message = stalled(report)
    assert reason == "HostRemovedWithVms" and "host kvm02 is no longer listed" in message
    assert message.endswith(f"the last accepted revision {'a' * 12} is applied")
    assert report.problems[0].startswith("fleet.yaml: spec.hosts: host kvm02")
    made = [(h, m) for h, m, _ in world.mutating_calls() if m != "ensure_image"]
    assert made == [("kvm01", "create")]
    assert owned_on(world, "kvm02") == on_kvm02  # nothing deleted there


def test_a_host_drained_until_the_status_reports_it_empty_may_be_removed(
    tmp_path: Path,
) -> None:
    world = FleetRepo(tmp_path)
    world.cycle()
    world.write(BOTH, PROXIES)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(
        fleet.read_text().replace(
            "address: kvm02.example.test\n", "address: kvm02.example.test\n      state: draining\n"
        )
    )
    report, runs = world.cycle("rev2"), 1
    while (owned_on(world, "kvm02") or status_of(report)["hosts"][1]["owned"]) and runs < 10:
        world.time.sleep(60)  # each run moves a batch; a later one deletes the old VMs
        report, runs = world.cycle("rev2"), runs + 1
    assert status_of(report)["hosts"][1] == {**status_of(report)["hosts"][1], "owned": 0}
    last = status_of(report)
    world.engine.last_status = lambda root: last
    world.write(("kvm01",), PROXIES)

    assert world.cycle("rev3").result is RunResult.SUCCESS


def test_a_removed_host_the_status_has_no_vm_count_for_is_let_go_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    world, last = removed_after_a_run(tmp_path)
    for host in last["hosts"]:
        del host["owned"]  # a status the daemon did not write

    with caplog.at_level(logging.WARNING, logger="reconciler.engine.guards"):
        report = world.cycle("rev2")

    assert report.result is not RunResult.STALLED, report.problems
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "reconciler.engine.guards"]
    assert warning.startswith("Host kvm02 left fleet.yaml; the fleet's last status has no VM")


def test_a_removed_host_unreachable_at_the_last_run_is_let_go_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    world, last = removed_after_a_run(tmp_path)
    on_kvm02 = owned_on(world, "kvm02")
    (kvm02,) = [h for h in last["hosts"] if h["name"] == "kvm02"]
    kvm02["reachable"] = False

    with caplog.at_level(logging.WARNING, logger="reconciler.engine.guards"):
        report = world.cycle("rev2")

    assert report.result is not RunResult.STALLED, report.problems
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "reconciler.engine.guards"]
    assert "host kvm02 is no longer listed" in warning and on_kvm02[0] in warning
    assert "taken as gone for good and its removal is allowed" in warning


def test_no_known_status_checks_nothing(tmp_path: Path) -> None:
    world, _ = removed_after_a_run(tmp_path)
    world.engine.last_status = lambda root: None

    assert world.cycle("rev2").result is not RunResult.STALLED


def test_apply_and_plan_refuse_the_removal_read_from_the_real_status_branch_with_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    remote = make_remote(tmp_path)
    world = FleetRepo(remote.work)
    first = remote.commit({}, "Three proxies on two hosts")
    writer = GitStatusWriter(RepoSettings(url=remote.url), StatusSettings(), tmp_path / "daemon")
    published = writer.publish(world.cycle(first))  # the daemon's run, committed as status
    assert published.commit and not published.error, published
    on_kvm02 = owned_on(world, "kvm02")
    world.write(("kvm01",), PROXIES)
    second = remote.commit({}, "Drop kvm02")
    world.engine.last_status = functools.partial(last_status, status=StatusSettings(), timeout=30.0)
    world.forget_calls()

    args = build_parser().parse_args(["apply", "--repo", str(remote.work), "--yes"])
    code = apply.apply_with(args, world.engine, revision=lambda: second)

    planned = plan._live(
        build_parser().parse_args(["plan", "--repo", str(remote.work)]),
        Started(world.engine, None, lambda: second, None),
    )

    applied, shown = capsys.readouterr().err.split(f"{remote.work}: nothing was planned:")
    assert (code, planned) == (1, 1), applied + shown
    for err in (applied, shown):
        assert "host kvm02 is no longer listed" in err and all(vm in err for vm in on_kvm02)
    assert world.mutating_calls() == []
