"""``proxyfleet validate --json``: the verdict and each problem as data, for CI tools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.cli import exitcodes, main

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fleet-repo"


def test_validate_json_lists_each_problem_with_file_line_column_field_and_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "fleet.yaml").write_text("kind: Fleet\nspec: [\n")
    assert main(["validate", "--json", str(tmp_path)]) == exitcodes.ERROR
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["valid"] is False and document["summary"] is None
    assert document["problems"]
    for problem in document["problems"]:
        assert set(problem) == {"file", "line", "column", "field", "message"}
        assert problem["file"] == "fleet.yaml" and problem["line"] >= 1
    assert captured.err == ""


def test_validate_json_of_a_valid_repo_says_valid_with_the_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["validate", "--json", "--repo", str(EXAMPLE)]) == exitcodes.OK
    document = json.loads(capsys.readouterr().out)
    assert document["valid"] is True and document["problems"] == []
    assert "proxies" in document["summary"]
