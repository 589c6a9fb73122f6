"""``apply`` runs again while the fleet is still moving: a run never waits for a boot, so a
replace's old VM goes in a follow-up run of the same command (reconciler.cli.followups)."""

from __future__ import annotations

from pathlib import Path

import pytest
from enginefakes import FleetRepo

from reconciler.cli import apply, build_parser


@pytest.fixture
def world(tmp_path: Path) -> FleetRepo:
    return FleetRepo(tmp_path)


def run_apply(world: FleetRepo, *flags: str) -> int:
    args = build_parser().parse_args(["apply", "--repo", str(world.root), *flags])
    return apply.apply_with(args, world.engine)


def domains(world: FleetRepo) -> set[str]:
    return {d for host in world.hosts.values() for d in host.domains}


def changed_user_data(world: FleetRepo) -> None:
    text = (world.root / "proxies.yaml").read_text()
    (world.root / "proxies.yaml").write_text(text.replace("hostname: web-1", "hostname: v2"))


def test_one_apply_replaces_a_changed_proxy_whole_its_old_vm_deleted_by_a_follow_up_run(
    world: FleetRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_apply(world, "--yes") == 0
    before = domains(world)
    changed_user_data(world)

    code = run_apply(world, "--yes")

    captured = capsys.readouterr()
    after = domains(world)
    assert code == 0
    assert len(after) == len(before) == 3
    assert len(after - before) == 1  # web-1's new VM, and its old one is gone
    # The fake's new VM answers in the replace's own run: the handover follows at once.
    assert "follow-up run in 1 s" in captured.err
    assert "ok      replace " in captured.out
    assert "ok      delete " in captured.out


def test_apply_no_wait_makes_one_run_and_leaves_the_old_vm_to_a_later_one(
    world: FleetRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_apply(world, "--yes") == 0
    changed_user_data(world)

    run_apply(world, "--yes", "--no-wait")

    assert len(domains(world)) == 4
    assert "follow-up" not in capsys.readouterr().err


def test_apply_of_creates_alone_makes_no_follow_up_run(
    world: FleetRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_apply(world, "--yes") == 0

    assert "follow-up" not in capsys.readouterr().err
    assert len(world.time.sleeps) == 0
