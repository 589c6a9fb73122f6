"""Broken fleet repos as data: each case directory holds the repo and expected.txt.

``expected.txt`` lists exactly the lines ``proxyfleet validate`` must print on
stderr, in order. Adding a case is adding a directory.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.cli import main

CASES = Path(__file__).parent / "validation_cases"
CASE_DIRS = sorted(p for p in CASES.iterdir() if p.is_dir())


def test_there_are_at_least_thirty_broken_repos() -> None:
    assert len(CASE_DIRS) >= 30


@pytest.mark.parametrize("case", CASE_DIRS, ids=[p.name for p in CASE_DIRS])
def test_validate_reports_exactly_the_expected_errors(
    case: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = (case / "expected.txt").read_text().splitlines()
    assert expected, "a case must expect at least one error"

    code = main(["validate", str(case)])

    captured = capsys.readouterr()
    assert captured.err.splitlines() == expected
    assert captured.out == ""
    assert code == 1
