"""``proxyfleet apply``: plan, confirm, apply, check, print; exit codes 0 / 1 / 3."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from enginefakes import FleetRepo

from reconciler.cli import apply, build_parser, main
from reconciler.cli.common import ssh_settings, state_dir
from reconciler.errors import PermanentError
from reconciler.model.settings import SshSettings


@pytest.fixture
def world(tmp_path: Path) -> FleetRepo:
    return FleetRepo(tmp_path)


def run_apply(world: FleetRepo, *flags: str) -> int:
    args = build_parser().parse_args(["apply", "--repo", str(world.root), *flags])
    return apply.apply_with(args, world.engine)


def test_apply_yes_creates_every_proxy_prints_the_table_and_exits_0(
    world: FleetRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_apply(world, "--yes")

    out = capsys.readouterr().out
    assert code == 0
    assert len(world.mutating_calls()) == 5  # two image uploads, three creates
    assert "PROXY  HOST   DOMAIN" in out
    assert "web-1  kvm01  pf-home-web-1-" in out
    assert "running  192.0.2." in out
    assert "Apply success: 3 succeeded, 0 failed, 0 skipped; 3/3 proxies healthy." in out


def test_apply_without_a_terminal_and_without_yes_refuses_and_applies_nothing(
    world: FleetRepo, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("yes\n"))

    code = run_apply(world)

    assert code == 1
    assert world.mutating_calls() == []
    assert "pass --yes" in capsys.readouterr().err


def test_apply_asks_on_a_terminal_and_only_yes_goes_ahead(
    world: FleetRepo, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    monkeypatch.setattr("sys.stdin", Tty("y\n"))
    assert run_apply(world) == 1
    assert world.mutating_calls() == []
    assert "Apply cancelled" in capsys.readouterr().err

    monkeypatch.setattr("sys.stdin", Tty("yes\n"))
    assert run_apply(world) == 0
    assert "Apply these 3 change(s)" in capsys.readouterr().out


def test_apply_with_nothing_to_do_asks_nothing_and_exits_0(
    world: FleetRepo, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    run_apply(world, "--yes")
    world.forget_calls()
    monkeypatch.setattr("sys.stdin", io.StringIO(""))

    assert run_apply(world) == 0
    assert world.mutating_calls() == []


def test_apply_exits_3_when_an_action_fails(
    world: FleetRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    world.hosts["kvm02"].fail("create", PermanentError("pool is full"))

    code = run_apply(world, "--yes")

    out = capsys.readouterr().out
    assert code == 3
    assert "failed  create pf-home-web-2-" in out
    assert "pool is full" in out


def test_apply_on_an_invalid_repo_lists_the_problems_and_exits_1(
    world: FleetRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    (world.root / "broken.yaml").write_text("kind: Proxy\nmetadata: {name: x}\n")

    code = run_apply(world, "--yes")

    assert code == 1
    assert "broken.yaml:" in capsys.readouterr().err
    assert world.made == []


def test_apply_json_prints_one_document_with_the_exit_code(
    world: FleetRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run_apply(world, "--yes", "--json")

    doc = json.loads(capsys.readouterr().out)
    assert code == 0
    assert doc["result"] == "success"
    assert doc["exitCode"] == 0
    assert doc["plan"]["summary"]["create"] == 3
    assert [o["result"] for o in doc["outcomes"]] == ["succeeded"] * 3
    assert {p["health"] for p in doc["proxies"]} == {"healthy"}


def test_apply_json_without_yes_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", "--json"]) == 1
    assert "--json needs --yes" in capsys.readouterr().err


def test_ssh_settings_come_from_flags_then_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PROXYFLEET_SSH_KEY", "/env/key")
    monkeypatch.setenv("PROXYFLEET_KNOWN_HOSTS", "/env/known")
    monkeypatch.setenv("PROXYFLEET_STATE_DIR", "/env/state")
    config = tmp_path / "missing.yaml"
    args = build_parser().parse_args(["apply", "--ssh-key", "/flag/key", "--config", str(config)])

    ssh = ssh_settings(args, SshSettings())
    assert (str(ssh.key_file), str(ssh.known_hosts_file)) == ("/flag/key", "/env/known")
    assert str(state_dir(args)) == "/env/state"
