"""``proxyfleet apply`` reads its repo once: the load that names the fleet (the lock's name)
is the run's, unless that fleet's entry in a config of several reads with other limits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from loadcount import count_loads
from lockprocs import fleet_files

from reconciler.cli import main


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Every load of a repo by apply or its engine, by root."""
    return count_loads(monkeypatch)


def repo(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)
    return root


def test_apply_loads_its_repo_once(
    tmp_path: Path, loads: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = repo(tmp_path, fleet_files(0, hosts=False))

    code = main(["apply", "--repo", str(root), "--state-dir", str(tmp_path / "s"), "--yes"])

    assert code == 0, capsys.readouterr()
    assert loads == [root]
    assert (tmp_path / "s" / "locks").is_dir(), "the lock of the fleet was taken"


def test_a_repo_that_does_not_load_is_reported_with_its_problems_and_nothing_runs(
    tmp_path: Path, loads: list[Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files = fleet_files(0, hosts=False)
    root = repo(tmp_path, {**files, "fleet.yaml": files["fleet.yaml"] + "  bogus: 1\n"})

    code = main(
        ["apply", "--repo", str(root), "--state-dir", str(tmp_path / "s"), "--yes", "--json"]
    )

    report = json.loads(capsys.readouterr().out)
    assert code == 1
    assert report["result"] == "stalled"
    assert any("bogus" in problem for problem in report["problems"]), report["problems"]
    assert loads == [root, root], "loaded again by the engine, which reports the problems"
