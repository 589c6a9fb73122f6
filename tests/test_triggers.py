from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from daemonutil import wait_until
from gitutil import git

from reconciler.engine.triggers import IntervalSchedule, RepoWatcher, TriggerQueue, git_dir


def test_triggers_fired_while_nobody_waits_come_out_as_one_take() -> None:
    queue = TriggerQueue()
    for reason in ("webhook", "SIGHUP", "webhook", "commit"):
        queue.fire(reason)
    assert queue.take(0) == ("webhook", "SIGHUP", "commit")
    assert queue.take(0) == ()


def test_take_wakes_up_when_a_trigger_fires_from_another_thread() -> None:
    queue = TriggerQueue()
    threading.Timer(0.05, queue.fire, args=("webhook",)).start()
    assert queue.take(5) == ("webhook",)


@pytest.mark.parametrize(("draw", "expected"), [(0.0, 270.0), (0.5, 300.0), (0.75, 315.0)])
def test_the_interval_varies_by_the_jitter_fraction(draw: float, expected: float) -> None:
    schedule = IntervalSchedule(300, 0.1, random=lambda: draw)
    assert schedule.next_wait() == pytest.approx(expected)


@pytest.fixture
def local_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "fleet"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "fleet.yaml").write_text("kind: Fleet\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Initial")
    return repo


class Fired:
    def __init__(self) -> None:
        self.reasons: list[str] = []

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)


def watching(repo: Path, fired: Fired) -> tuple[RepoWatcher, threading.Event]:
    stop = threading.Event()
    watcher = RepoWatcher(repo, "main", fired, stop)
    watcher.start()
    time.sleep(0.3)  # let inotify set up its watches before anything changes
    return watcher, stop


def test_a_commit_to_the_local_repo_fires_within_two_seconds(local_repo: Path) -> None:
    fired = Fired()
    watcher, stop = watching(local_repo, fired)
    try:
        (local_repo / "proxy.yaml").write_text("kind: Proxy\n")
        git(local_repo, "add", "-A")
        committed = time.monotonic()
        git(local_repo, "commit", "-q", "-m", "Add a proxy")
        assert wait_until(lambda: fired.reasons != [], timeout=2.0)
        print(f"commit -> trigger in {time.monotonic() - committed:.2f} s")
        assert fired.reasons[0] == "commit"
    finally:
        stop.set()
        watcher.join(5)


def test_the_status_branch_and_the_work_tree_never_fire(local_repo: Path) -> None:
    fired = Fired()
    watcher, stop = watching(local_repo, fired)
    try:
        status = local_repo / ".proxyfleet"
        status.mkdir()
        (status / "status.yaml").write_text("kind: FleetStatus\n")
        (local_repo / "draft.yaml").write_text("kind: Proxy\n")  # not committed: no new revision
        tree = git(local_repo, "write-tree")
        commit = git(local_repo, "commit-tree", tree, "-m", "status")
        git(local_repo, "update-ref", "refs/heads/proxyfleet-status", commit)
        assert not wait_until(lambda: fired.reasons != [], timeout=1.5)
    finally:
        stop.set()
        watcher.join(5)


def test_the_git_directory_of_a_bare_repo_is_the_repo_itself(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q", "--bare", str(tmp_path / "bare.git"))
    assert git_dir(tmp_path / "bare.git") == tmp_path / "bare.git"
