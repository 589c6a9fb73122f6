"""``-o json`` / ``--output json``: a global flag, before or after the command, meaning the
command's own ``--json``; refused as a usage error where a command prints no JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.cli import main


@pytest.fixture
def inventory(tmp_path: Path) -> Path:
    path = tmp_path / "inventory.json"
    path.write_text('{"hosts": []}\n')
    return path


@pytest.mark.parametrize(
    "spelling",
    [
        ["-o", "json", "plan"],
        ["plan", "-o", "json"],
        ["plan", "--output", "json"],
        ["plan", "--output=json"],
        ["plan", "-ojson"],
    ],
)
def test_output_json_anywhere_prints_what_plan_json_prints(
    spelling: list[str],
    example_repo: Path,
    inventory: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    where = ["--repo", str(example_repo), "--inventory", str(inventory)]
    expected_code = main(["plan", *where, "--json"])
    expected = json.loads(capsys.readouterr().out)

    code = main([*spelling, *where])

    assert code == expected_code
    assert json.loads(capsys.readouterr().out) == expected


def test_output_json_on_validate_is_validate_json(
    example_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "--repo", str(example_repo), "--json"]) == 0
    expected = capsys.readouterr().out

    assert main(["--output", "json", "validate", str(example_repo)]) == 0
    assert capsys.readouterr().out == expected


def test_output_text_leaves_a_command_as_it_prints_without_the_flag(
    example_repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["validate", "-o", "text", str(example_repo)]) == 0
    assert capsys.readouterr().out == "5 proxies in 2 zones on 3 hosts\n"


def test_output_json_on_a_command_without_json_output_is_a_usage_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["config", "check", "-o", "json", "/nonexistent.yaml"])

    assert exit.value.code == 64
    assert "-o json: proxyfleet config has no JSON output" in capsys.readouterr().err


def test_an_output_format_nobody_knows_is_a_usage_error_listing_the_known(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["plan", "-o", "yaml"])

    assert exit.value.code == 64
    assert "invalid choice: 'yaml' (choose from" in capsys.readouterr().err
