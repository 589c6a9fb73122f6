"""``proxyfleet plan -out FILE`` and ``proxyfleet apply FILE`` over fake hosts: the plan
reviewed is the plan applied, or nothing is (reconciler.cli.savedplan)."""

from __future__ import annotations

import json
import shutil
import stat
from pathlib import Path

import pytest
from enginefakes import FleetRepo
from secretutil import make_identity, write_secret

from reconciler.adapters.secrets.agesecrets import load_identity
from reconciler.cli import apply, build_parser, main, plan, savedplan
from reconciler.cli.applyengine import Started
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.model import Domain, DomainState, Owner
from reconciler.model.inventory import Capacity


@pytest.fixture
def world(tmp_path: Path) -> FleetRepo:
    root = tmp_path / "repo"
    root.mkdir()
    return FleetRepo(root)


def save(world: FleetRepo, path: Path, *, revision: str = "rev1") -> int:
    """``plan -out path`` with the world's engine (its fake hosts)."""
    args = build_parser().parse_args(["plan", "--repo", str(world.root), "-out", str(path)])
    return plan._live(args, Started(world.engine, None, lambda: revision, None))


def apply_saved(world: FleetRepo, path: Path, *, revision: str = "rev1") -> int:
    """``apply path`` with the world's engine, as ``apply.run`` calls it."""
    args = build_parser().parse_args(["apply", str(path)])
    saved = savedplan.read(path)
    args.repo = saved.repo
    return apply.apply_with(args, world.engine, revision=lambda: revision, saved=saved)


def test_a_saved_plan_is_applied_without_asking_and_does_what_it_listed(
    world: FleetRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = world.root / "tfplan.json"  # in the checkout, as `plan -out tfplan` leaves it

    assert save(world, path) == 2
    listed = capsys.readouterr().out
    assert world.mutating_calls() == [], "plan -out changes nothing"
    assert "Plan: 3 to create" in listed and f"To apply it: proxyfleet apply {path}" in listed

    code = apply_saved(world, path)

    out = capsys.readouterr().out
    assert code == 0, out
    created = sorted(t for _h, m, t in world.mutating_calls() if m == "create")
    saved_creates = sorted(
        a["domain"] for a in savedplan.read(path).listing["actions"] if a["action"] == "create"
    )
    assert created == saved_creates and len(created) == 3
    assert "Apply success: 3 succeeded" in out


def test_the_saved_plan_file_is_mode_0600_even_over_an_existing_file(
    world: FleetRepo, tmp_path: Path
) -> None:
    path = tmp_path / "plan.json"
    path.write_text("old")
    path.chmod(0o644)

    save(world, path)

    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text())["format"] == savedplan.FORMAT


def test_a_saved_plan_is_refused_after_a_new_commit_and_nothing_is_applied(
    world: FleetRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.json"
    save(world, path, revision="a" * 40)
    capsys.readouterr()

    code = apply_saved(world, path, revision="b" * 40)

    err = capsys.readouterr().err
    assert code == 1
    assert world.mutating_calls() == []
    assert f"the plan saved in {path} no longer holds; nothing was applied" in err
    assert f"the repo's revision is {'b' * 40}, it was {'a' * 40}" in err
    assert f"proxyfleet plan -out {path}" in err


def test_a_saved_plan_is_refused_after_an_uncommitted_edit_of_the_repo(
    world: FleetRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.json"
    save(world, path, revision="a" * 40 + "+dirty")
    world.write(("kvm01", "kvm02"), ("web-1", "web-2", "web-3", "web-4"))
    capsys.readouterr()

    code = apply_saved(world, path, revision="a" * 40 + "+dirty")

    assert code == 1
    assert world.mutating_calls() == []
    assert f"files under {world.root} changed since the plan" in capsys.readouterr().err


def test_a_saved_plan_applied_to_a_copy_of_its_repo_with_an_edit_is_refused(
    world: FleetRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.json"
    save(world, path)
    other = tmp_path / "other"
    shutil.copytree(world.root, other)
    (other / "proxies.yaml").write_text((other / "proxies.yaml").read_text() + "\n# edited\n")
    args = build_parser().parse_args(["apply", str(path), "--repo", str(other)])
    capsys.readouterr()

    code = apply.apply_with(args, world.engine, revision=lambda: "rev1", saved=savedplan.read(path))

    assert code == 1
    assert world.mutating_calls() == []
    err = capsys.readouterr().err
    assert f"files under {other} changed since the plan (made from {world.root})" in err


def test_a_saved_plan_is_refused_when_a_host_runs_something_else_since(
    world: FleetRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.json"
    save(world, path)
    stranger = Owner("other-fleet", "db", "0" * 64)
    world.hosts["kvm02"].domains["db-1"] = Domain("db-1", DomainState.RUNNING, stranger)
    capsys.readouterr()

    code = apply_saved(world, path)

    err = capsys.readouterr().err
    assert code == 1
    assert world.mutating_calls() == []
    assert "host kvm02 runs something else now" in err
    assert "kvm01" not in err


def test_a_saved_plan_holds_when_only_a_pools_free_space_moved(
    world: FleetRepo, tmp_path: Path
) -> None:
    for host in world.hosts.values():
        host.capacity = Capacity(8, 16384, 10**12, 5 * 10**11)
    path = tmp_path / "plan.json"
    save(world, path)
    for host in world.hosts.values():
        host.capacity = Capacity(8, 16384, 10**12, 5 * 10**11 - 4096)

    assert apply_saved(world, path) == 0


def test_a_saved_plan_never_holds_a_secrets_value(
    world: FleetRepo, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    identity = tmp_path / "identity.txt"
    write_secret(world.root, "token", "s3cr3t-canary-value", make_identity(identity))
    proxies = world.root / "proxies.yaml"
    proxies.write_text(
        proxies.read_text().replace(
            "hostname: web-1", "hostname: web-1\n      password: ${secret:token}"
        )
    )
    world.engine.secrets = SecretAccess(load_identity(identity), need_values=True)
    path = tmp_path / "plan.json"

    assert save(world, path) == 2

    text = path.read_text()
    assert "s3cr3t-canary-value" not in text
    assert "s3cr3t-canary-value" not in capsys.readouterr().out
    web1 = next(a for a in savedplan.read(path).listing["actions"] if a["proxy"] == "web-1")
    assert web1["secrets"] == {"token": "(sensitive)"}
    assert apply_saved(world, path) == 0
    spec = next(s for s in world.hosts["kvm01"].specs.values() if s.proxy == "web-1")
    assert "s3cr3t-canary-value" in spec.cloud_init.rendered_user_data(), "applied with it"


def test_apply_refuses_a_file_that_is_not_a_saved_plan_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "plan.json"
    path.write_text('{"actions": []}\n')

    code = main(["apply", str(path)])

    err = capsys.readouterr().err
    assert code == 1
    assert f"{path}: not a saved plan of this proxyfleet" in err
    assert "nothing was applied" in err


def test_plan_out_against_an_inventory_file_is_a_usage_error(
    example_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inventory = tmp_path / "inventory.json"
    inventory.write_text('{"hosts": []}\n')
    path = tmp_path / "plan.json"

    code = main(
        ["plan", "--repo", str(example_repo), "--inventory", str(inventory), "-out", str(path)]
    )

    assert code == 64
    assert not path.exists()
    assert "cannot be applied" in capsys.readouterr().err
