"""The pre-commit hook fleet repos use runs ``proxyfleet validate`` on the whole repo."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from reconciler.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_hook_runs_validate_on_the_repo_and_fails_a_broken_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (hook,) = YAML(typ="safe").load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "proxyfleet-validate" and hook["pass_filenames"] is False
    program, *argv = shlex.split(hook["entry"])
    assert program == "proxyfleet"

    good = ROOT / "examples" / "fleet-repo"
    assert main([*argv[:-1], str(good)]) == 0
    (tmp_path / "fleet.yaml").write_text("kind: Fleet\nmetadata: {name: x}\nspec: {nope: 1}\n")
    assert main([*argv[:-1], str(tmp_path)]) == 1
    assert "fleet.yaml:3:" in capsys.readouterr().err
