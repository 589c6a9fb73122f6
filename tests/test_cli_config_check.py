"""``proxyfleet config check``: the daemon config checked without starting the daemon."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.cli import exitcodes, main


def test_config_check_exits_0_and_says_what_the_daemon_would_serve(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "proxyfleet.yaml"
    config.write_text("repo:\n  url: git@git.example.org:infra/fleet.git\ninterval: 5m\n")
    assert main(["config", "check", str(config)]) == exitcodes.OK
    out = capsys.readouterr().out
    assert out == f"{config}: ok (repo git@git.example.org:infra/fleet.git, every 300 s)\n"


def test_config_check_exits_1_with_the_file_line_and_field_of_each_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "proxyfleet.yaml"
    config.write_text("repo:\n  url: git@git.example.org:infra/fleet.git\nintervall: 300\n")
    assert main(["config", "check", str(config)]) == exitcodes.ERROR
    captured = capsys.readouterr()
    assert captured.out == ""
    assert f"{config}:3:1: intervall:" in captured.err
    assert "did you mean 'interval'" in captured.err


def test_config_check_of_a_missing_file_exits_1_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["config", "check", str(tmp_path / "nope.yaml")]) == exitcodes.ERROR
    assert "nope.yaml:0:0: cannot read the config" in capsys.readouterr().err
