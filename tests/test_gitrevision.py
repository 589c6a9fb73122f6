"""``apply`` names the commit it applied: git's two answers (the checked-out commit, local
changes) asked at once while the repo loads, "" when there is no answer."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from reconciler.cli import gitrevision


def git(root: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    (root / "fleet.yaml").write_text("kind: Fleet\n")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "one")
    return root


def test_a_clean_checkout_is_named_by_its_commit(checkout: Path) -> None:
    assert gitrevision.start_revision(checkout)() == git(checkout, "rev-parse", "HEAD")


def test_a_checkout_with_local_changes_is_its_commit_plus_dirty(checkout: Path) -> None:
    (checkout / "fleet.yaml").write_text("kind: Fleet\n# edited\n")
    assert gitrevision.start_revision(checkout)() == git(checkout, "rev-parse", "HEAD") + "+dirty"


def test_a_directory_that_is_no_checkout_has_no_revision(tmp_path: Path) -> None:
    assert gitrevision.start_revision(tmp_path)() == ""


def test_a_git_that_does_not_answer_in_time_gives_no_revision_and_is_stopped(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    started = tmp_path / "started"
    fake = bin_dir / "git"
    fake.write_text(f"#!/bin/sh\necho $$ >> {started}\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(gitrevision, "GIT_TIMEOUT", 0.2)

    began = time.monotonic()
    assert gitrevision.start_revision(checkout)() == ""

    assert time.monotonic() - began < 10, "waited for the sleeping git"
    pids = [int(line) for line in started.read_text().split()]
    assert len(pids) == 2, "both questions asked at once"
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), f"git {pid} left running"
