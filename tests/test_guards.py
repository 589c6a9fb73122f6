"""The engine's guards against a repo that lies: fleet id, shrink, delete window, images."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

from daemonutil import real_daemon, running, wait_until
from enginefakes import FleetRepo

from reconciler.adapters.git.fakesource import FakeSource
from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli import compose
from reconciler.cli.common import guard_settings
from reconciler.core.load.settings import parse_settings
from reconciler.engine.daemon import source_cycle
from reconciler.engine.reconcile import Engine
from reconciler.model import ActionKind
from reconciler.model.report import RunResult
from reconciler.model.settings import ApplySettings, GuardSettings


def guarded(world: FleetRepo, **kw: object) -> Engine:
    """Give ``world`` an engine with guards (its fake hosts and time stay)."""
    world.engine = compose.engine(
        world.factory,
        images=FakeImages(),
        prober=FakeProber(),
        settings=ApplySettings(observe_timeout=2.0),
        runtime=world.time.runtime(world.stop),
        guards=GuardSettings(**kw),  # type: ignore[arg-type]
    )
    return world.engine


def stalled_reason(report: object) -> str:
    stalled = next(c for c in report.conditions if c.type == "Stalled")  # type: ignore[attr-defined]
    assert stalled.status
    return str(stalled.reason)


def test_a_repo_naming_another_fleet_is_stalled_before_any_host_is_contacted(
    tmp_path: Path,
) -> None:
    world = FleetRepo(tmp_path)
    guarded(world, fleet="office")
    report = world.cycle()
    assert report.result is RunResult.STALLED
    assert stalled_reason(report) == "FleetIdMismatch"
    assert "the repo is fleet 'home' but this daemon acts for fleet 'office'" in report.problems[0]
    assert report.problems[0].startswith("fleet.yaml:1:1: metadata.name:")
    assert world.made == []


def test_the_pinned_fleet_id_lets_its_own_repo_through(tmp_path: Path) -> None:
    world = FleetRepo(tmp_path)
    guarded(world, fleet="home")
    assert world.cycle().result is RunResult.SUCCESS
    assert [m for _, m, _ in world.mutating_calls()].count("create") == 3


def test_dropping_more_than_half_of_the_proxies_is_stalled_until_acknowledged(
    tmp_path: Path,
) -> None:
    world = FleetRepo(tmp_path)
    world.write(("kvm01", "kvm02"), ("web-1", "web-2", "web-3", "web-4"))
    assert world.cycle().result is RunResult.SUCCESS
    world.forget_calls()
    world.write(("kvm01", "kvm02"), ("web-1",))
    report = world.cycle("rev2")
    assert stalled_reason(report) == "ShrinkNotAcknowledged"
    assert "drops 3 of the 4 proxies the hosts run (75% > 50%)" in report.problems[0]
    assert "acknowledgeShrinkTo: 1" in report.problems[0]
    assert world.mutating_calls() == []
    world.write(("kvm01", "kvm02"), ("web-1",), extra="")
    fleet = (tmp_path / "fleet.yaml").read_text()
    (tmp_path / "fleet.yaml").write_text(
        fleet.replace("prune: true", "prune: true\n    acknowledgeShrinkTo: 1")
    )
    acknowledged = world.cycle("rev3")
    assert acknowledged.result is RunResult.SUCCESS
    assert [m for _, m, _ in world.mutating_calls()] == ["delete"] * 3


def test_an_acknowledgement_covers_only_the_count_it_names(tmp_path: Path) -> None:
    world = FleetRepo(tmp_path)
    world.write(("kvm01", "kvm02"), ("web-1", "web-2", "web-3", "web-4"))
    world.cycle()
    world.forget_calls()
    world.write(("kvm01", "kvm02"), ())
    fleet = (tmp_path / "fleet.yaml").read_text()
    (tmp_path / "fleet.yaml").write_text(
        fleet.replace(
            "prune: true", "prune: true\n    allowEmpty: true\n    acknowledgeShrinkTo: 1"
        )
    )
    assert stalled_reason(world.cycle("rev2")) == "ShrinkNotAcknowledged"
    assert world.mutating_calls() == []


def test_dropping_half_or_less_goes_through_the_planner_as_before(tmp_path: Path) -> None:
    world = FleetRepo(tmp_path)
    world.write(("kvm01", "kvm02"), ("web-1", "web-2", "web-3", "web-4"))
    world.cycle()
    world.forget_calls()
    world.write(("kvm01", "kvm02"), ("web-1", "web-2"))
    assert world.cycle("rev2").result is RunResult.SUCCESS
    assert [m for _, m, _ in world.mutating_calls()] == ["delete"] * 2


def with_max_deletes(world: FleetRepo, n: int) -> None:
    fleet = (world.root / "fleet.yaml").read_text()
    (world.root / "fleet.yaml").write_text(
        fleet.replace("maxDeletesPerRun: 5", f"maxDeletesPerRun: {n}\n    maxShrinkPercent: 100")
    )


def test_the_delete_cap_holds_across_a_restart_within_the_window(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    state = tmp_path / "state" / "deletes.json"
    world = FleetRepo(repo)
    world.write(("kvm01", "kvm02"), ("web-1", "web-2", "web-3", "web-4"))
    guarded(world, state_file=state, delete_window=3600)
    world.cycle()
    world.forget_calls()
    world.write(("kvm01", "kvm02"), ())
    fleet = (repo / "fleet.yaml").read_text()
    (repo / "fleet.yaml").write_text(
        fleet.replace("prune: true", "prune: true\n    allowEmpty: true")
    )
    with_max_deletes(world, 2)
    first = world.cycle("rev2")
    assert [m for _, m, _ in world.mutating_calls()] == ["delete"] * 2
    assert len(first.plan.of_kind(ActionKind.BLOCKED)) == 2  # type: ignore[union-attr]
    for _ in range(3):  # a crash loop: every restart is a new engine and a new run
        world.forget_calls()
        world.time.sleep(60)
        guarded(world, state_file=state, delete_window=3600)
        report = world.cycle("rev2")
        assert world.mutating_calls() == []
        blocked = report.plan.of_kind(ActionKind.BLOCKED)  # type: ignore[union-attr]
        assert {a.reason for a in blocked} == {"deletes beyond maxDeletesPerRun (2) within 3600 s"}
    world.time.sleep(3600)
    guarded(world, state_file=state, delete_window=3600)
    world.cycle("rev2")
    assert [m for _, m, _ in world.mutating_calls()] == ["delete"] * 2


def test_an_unreadable_delete_record_blocks_deletes_instead_of_resetting_them(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    state = tmp_path / "deletes.json"
    world = FleetRepo(repo)
    guarded(world, state_file=state)
    world.cycle()
    world.forget_calls()
    state.write_text("{not json")
    world.write(("kvm01", "kvm02"), ("web-1", "web-2"))
    report = world.cycle("rev2")
    assert world.mutating_calls() == []
    blocked = report.plan.of_kind(ActionKind.BLOCKED)  # type: ignore[union-attr]
    assert len(blocked) == 1 and "unreadable" in blocked[0].reason


def test_an_image_the_box_does_not_allow_stalls_before_any_host_is_contacted(
    tmp_path: Path,
) -> None:
    world = FleetRepo(tmp_path)
    fleet = (tmp_path / "fleet.yaml").read_text()
    (tmp_path / "fleet.yaml").write_text(
        fleet.replace("https://images.example.test/debian-12.qcow2", "file:///dev/zero")
    )
    guarded(world, allowed_file_dirs=(Path("/srv/images"),))
    report = world.cycle()
    assert stalled_reason(report) == "ImageRefused"
    assert "spec.images.debian-12.url: file URL file:///dev/zero is outside" in report.problems[0]
    assert world.made == []


def test_renaming_every_proxy_is_no_shrink(tmp_path: Path) -> None:
    world = FleetRepo(tmp_path)
    world.write(("kvm01", "kvm02"), ("web-1", "web-2"))
    world.cycle()
    world.forget_calls()
    world.write(("kvm01", "kvm02"), ("edge-1", "edge-2"))
    assert world.cycle("rev2").result is RunResult.SUCCESS
    methods = [m for _, m, _ in world.mutating_calls()]
    assert methods.count("create") == 2 and methods.count("delete") == 2


def test_the_engine_reads_the_repo_within_the_limits_it_was_given(tmp_path: Path) -> None:
    from reconciler.core.load.repofiles import ReadLimits

    world = FleetRepo(tmp_path)
    world.engine = compose.engine(
        world.factory,
        images=FakeImages(),
        prober=FakeProber(),
        runtime=world.time.runtime(world.stop),
        read_limits=ReadLimits(max_file_bytes=300),
    )
    report = world.cycle()
    assert report.result is RunResult.STALLED
    assert report.problems == (
        "fleet.yaml:0:0: larger than the limit of 300 bytes",
        "proxies.yaml:0:0: larger than the limit of 300 bytes",
    )
    assert world.made == []


BOX_CAP = (
    "deletes beyond the box's limit maxDeletesPerRun (1, daemon config) within 3600 s; "
    "the fleet repo's policy cannot raise it"
)


def test_an_acknowledged_shrink_is_still_bounded_by_the_box_cap(tmp_path: Path) -> None:
    world = FleetRepo(tmp_path)
    world.write(("kvm01", "kvm02"), ("web-1", "web-2", "web-3", "web-4"))
    guarded(world, max_deletes=1)
    world.cycle()
    world.forget_calls()
    world.write(("kvm01", "kvm02"), ("web-1",))
    fleet = (tmp_path / "fleet.yaml").read_text()
    (tmp_path / "fleet.yaml").write_text(  # the commit raises its own limit and acknowledges
        fleet.replace("prune: true", "prune: true\n    acknowledgeShrinkTo: 1").replace(
            "maxDeletesPerRun: 5", "maxDeletesPerRun: 1000"
        )
    )

    report = world.cycle("rev2")

    assert report.result is not RunResult.STALLED
    assert [m for _, m, _ in world.mutating_calls()] == ["delete"]
    blocked = report.plan.of_kind(ActionKind.BLOCKED)  # type: ignore[union-attr]
    assert [a.reason for a in blocked] == [BOX_CAP, BOX_CAP]


def test_the_repo_policy_still_holds_below_the_box_cap(tmp_path: Path) -> None:
    world = FleetRepo(tmp_path)
    world.write(("kvm01", "kvm02"), ("web-1", "web-2", "web-3", "web-4"))
    guarded(world, max_deletes=3)
    world.cycle()
    world.forget_calls()
    world.write(("kvm01", "kvm02"), ("web-1",))
    with_max_deletes(world, 1)

    report = world.cycle("rev2")

    assert [m for _, m, _ in world.mutating_calls()] == ["delete"]
    blocked = report.plan.of_kind(ActionKind.BLOCKED)  # type: ignore[union-attr]
    assert {a.reason for a in blocked} == {"beyond maxDeletesPerRun (1)"}


def test_the_daemon_config_cap_bounds_a_commit_that_raises_its_own_limit(tmp_path: Path) -> None:
    repo, state = tmp_path / "repo", tmp_path / "state"
    repo.mkdir()
    world = FleetRepo(repo)
    world.write(("kvm01", "kvm02"), ("web-1", "web-2", "web-3", "web-4"))
    world.cycle()
    world.forget_calls()
    world.write(("kvm01", "kvm02"), ("web-1",))
    fleet = (repo / "fleet.yaml").read_text()
    (repo / "fleet.yaml").write_text(
        fleet.replace("prune: true", "prune: true\n    acknowledgeShrinkTo: 1").replace(
            "maxDeletesPerRun: 5", "maxDeletesPerRun: 1000"
        )
    )
    config = "repo: {url: file:///nowhere}\nlisten: 127.0.0.1:0\nmaxDeletesPerRun: 1\n"
    settings = parse_settings(config, name="proxyfleet.yaml", base=tmp_path)
    settings = dataclasses.replace(settings, interval=3600, state_dir=state)
    guards = guard_settings(settings, state)  # what `proxyfleet run` and `apply` build
    assert guards.max_deletes == 1
    engine = guarded(world, **dataclasses.asdict(guards))
    cycle = source_cycle(
        FakeSource(repo), lambda root, rev: engine.reconcile_once(root, revision=rev)
    )
    daemon = real_daemon(settings, cycle, handle_signals=False, stop=threading.Event())

    with running(daemon):
        assert wait_until(lambda: len(daemon.reports) == 1, timeout=30)

    report = daemon.reports[0]
    assert [m for _, m, _ in world.mutating_calls()] == ["delete"]
    blocked = report.plan.of_kind(ActionKind.BLOCKED)  # type: ignore[union-attr]
    assert [a.reason for a in blocked] == [BOX_CAP, BOX_CAP]
