"""``proxyfleet status`` prints what the daemon committed to the status branch."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.cli import main
from reconciler.core.status import statusdoc
from reconciler.model import ActionKind, Plan
from reconciler.model.plan import Blocked
from reconciler.model.report import (
    Condition,
    Health,
    HostStatus,
    ProxyStatus,
    RunReport,
    RunResult,
)

WHEN = datetime(2026, 9, 4, 14, 0, tzinfo=UTC)


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def status_text() -> str:
    report = RunReport(
        started=WHEN,
        finished=WHEN,
        result=RunResult.SUCCESS,
        revision="c0ffee" * 6,
        plan=Plan(
            (
                Blocked(
                    reason="host kvm02 is unreachable",
                    proxy="web-9",
                    blocks=ActionKind.CREATE,
                ),
            )
        ),
        proxies=(
            ProxyStatus(
                "web-1", "kvm01", "pf-home-web-1-0123abcd", "running", "192.0.2.11", Health.HEALTHY
            ),
        ),
        hosts=(HostStatus("kvm01", True, zone="a", owned=1), HostStatus("kvm02", False, "refused")),
        conditions=(Condition("Ready", False, "ActionsBlocked", "1 action(s) blocked"),),
    )
    doc = statusdoc.build(report, None, runs=[statusdoc.run_entry(report)])
    return statusdoc.dump_yaml(doc)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "config", "user.email", "t@example.test")
    git(tmp_path, "config", "user.name", "t")
    (tmp_path / "fleet.yaml").write_text("kind: Fleet\n")
    git(tmp_path, "add", "fleet.yaml")
    git(tmp_path, "commit", "-qm", "fleet")
    return tmp_path


def test_status_reads_the_status_branch_while_main_is_checked_out(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    git(repo, "checkout", "-q", "--orphan", "proxyfleet-status")
    git(repo, "rm", "-q", "-rf", ".")
    (repo / ".proxyfleet").mkdir()
    (repo / ".proxyfleet" / "status.yaml").write_text(status_text())
    git(repo, "add", ".proxyfleet")
    git(repo, "commit", "-qm", "status")
    git(repo, "checkout", "-q", "main")
    assert not (repo / ".proxyfleet").exists()

    code = main(["status", "--repo", str(repo)])

    out = capsys.readouterr().out
    assert code == 0
    assert "proxyfleet-status:.proxyfleet/status.yaml" in out
    assert "web-1  kvm01  pf-home-web-1-0123abcd  running  192.0.2.11  healthy" in out
    assert "kvm02  " in out and "NO" in out
    assert "! create of web-9: host kvm02 is unreachable" in out
    assert "Ready      False   ActionsBlocked" in out


def test_status_without_a_status_file_says_where_it_looked_and_exits_1(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["status", "--repo", str(repo)])

    err = capsys.readouterr().err
    assert code == 1
    assert "no .proxyfleet/status.yaml" in err
    assert "fetch origin proxyfleet-status" in err


def test_status_json_prints_the_document(repo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (repo / ".proxyfleet").mkdir()
    (repo / ".proxyfleet" / "status.yaml").write_text(status_text())

    code = main(["status", "--repo", str(repo), "--json"])

    assert code == 0
    assert '"observedRevision": "c0ffeec0ffee' in capsys.readouterr().out
