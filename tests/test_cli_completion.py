"""``proxyfleet completion bash|zsh``: the printed script, sourced into a real bash and a
real zsh (Debian's, as the Makefile installs them), completes what the parser accepts."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from reconciler.cli import build_parser, completion, main

BASH = """source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _proxyfleet
printf '%s\\n' "${COMPREPLY[@]}"
"""
ZSH = """autoload -U compinit && compinit -u -D; source "$1"; shift
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _proxyfleet; print -rl -- $COMPREPLY
"""


@pytest.fixture(scope="module")
def scripts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each shell's script as ``proxyfleet completion SHELL`` prints it."""
    made = {}
    for shell in ("bash", "zsh"):
        path = tmp_path_factory.mktemp("completion") / f"proxyfleet.{shell}"
        path.write_text(completion.script(build_parser(), shell=shell) + "\n")
        made[shell] = path
    return made


def complete(shell: str, script: Path, line: str, *, cwd: Path | None = None) -> list[str]:
    """What Tab offers at the end of ``line`` (its last word, "" after a trailing space)."""
    found = shutil.which(shell)
    assert found, f"{shell} is missing: install Debian's {shell} (make deps does)"
    words = line.split(" ")
    program = ["--norc", "--noprofile", "-c", BASH] if shell == "bash" else ["-f", "-c", ZSH]
    done = subprocess.run(
        [found, *program, shell, str(script), *words],
        capture_output=True,
        text=True,
        check=True,
        cwd=cwd,
        timeout=60,
    )
    assert done.stderr == "", done.stderr
    return sorted(word for word in done.stdout.splitlines() if word)


CASES = [
    ("proxyfleet pl", ["plan"]),
    ("proxyfleet hosts ", ["check"]),
    ("proxyfleet -v hosts ch", ["check"]),
    ("proxyfleet plan -o ", ["json", "text"]),
    ("proxyfleet plan --output=j", ["json"]),
    ("proxyfleet deploy print ", ["alerts", "dashboard", "unit"]),
    ("proxyfleet completion ", ["bash", "zsh"]),
    ("proxyfleet apply --lock-t", ["--lock-timeout"]),
    ("proxyfleet apply --lock-timeout 5m --ye", ["--yes"]),
    ("proxyfleet reconcile --timeout ", []),
]


@pytest.mark.parametrize("shell", ["bash", "zsh"])
@pytest.mark.parametrize(("line", "offered"), CASES)
def test_the_shell_completes_commands_flags_and_their_choices(
    shell: str, line: str, offered: list[str], scripts: dict[str, Path]
) -> None:
    assert complete(shell, scripts[shell], line) == offered


@pytest.mark.parametrize("shell", ["bash", "zsh"])
def test_a_directory_flag_offers_directories_and_a_saved_plan_offers_files(
    shell: str, scripts: dict[str, Path], tmp_path: Path
) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "readme.txt").write_text("")
    (tmp_path / "plan.json").write_text("")

    assert complete(shell, scripts[shell], "proxyfleet plan --repo r", cwd=tmp_path) == ["repo"]
    assert complete(shell, scripts[shell], "proxyfleet apply --yes p", cwd=tmp_path) == [
        "plan.json"
    ]
    # A value given to --repo is not taken for a command ("plan" here is a directory).
    (tmp_path / "plan").mkdir()
    line = "proxyfleet validate --repo plan --js"
    assert complete(shell, scripts[shell], line, cwd=tmp_path) == ["--json"]


def test_completion_prints_the_script_for_the_shell_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["completion", "zsh"]) == 0
    zsh = capsys.readouterr().out
    assert main(["completion", "bash"]) == 0
    bash = capsys.readouterr().out

    assert "bashcompinit" in zsh and "bashcompinit" not in bash
    assert bash.rstrip().endswith("complete -F _proxyfleet proxyfleet")
