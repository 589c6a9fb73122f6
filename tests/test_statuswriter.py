from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from gitutil import Remote, git, make_remote
from reports import report

from reconciler.adapters.git.statuswriter import LAST_STATUS, GitStatusWriter
from reconciler.core.status import statusdoc
from reconciler.model.report import Health
from reconciler.model.settings import RepoSettings, StatusSettings

BRANCH = "proxyfleet-status"


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    return make_remote(tmp_path)


def writer(remote: Remote, workdir: Path, **kw: object) -> GitStatusWriter:
    return GitStatusWriter(
        RepoSettings(url=remote.url),
        StatusSettings(**kw),
        workdir,  # type: ignore[arg-type]
    )


def test_the_first_status_is_an_orphan_branch_commit_by_proxyfleet(
    remote: Remote, tmp_path: Path
) -> None:
    main_before = git(remote.bare, "rev-parse", "main")
    published = writer(remote, tmp_path / "w").publish(report(created=True))
    assert published.commit and not published.error
    assert git(remote.bare, "rev-parse", BRANCH) == published.commit
    assert (
        git(remote.bare, "log", "--format=%an <%ae>", BRANCH) == "proxyfleet <proxyfleet@localhost>"
    )
    assert git(remote.bare, "rev-list", "--count", BRANCH) == "1"
    assert git(remote.bare, "rev-parse", "main") == main_before
    files = git(remote.bare, "ls-tree", "-r", "--name-only", BRANCH).splitlines()
    assert files == [".proxyfleet/STATUS.md", ".proxyfleet/status.yaml"]
    body = git(remote.bare, "log", "-1", "--format=%B", BRANCH)
    assert "- proxy web-1 running on kvm-a, healthy" in body


def test_an_idle_run_adds_no_commit_and_a_change_adds_one(remote: Remote, tmp_path: Path) -> None:
    w = writer(remote, tmp_path / "w")
    w.publish(report(minute=0))
    idle = w.publish(report(minute=5))
    assert idle.commit == "" and idle.error == ""
    assert len(remote.branch_log(BRANCH)) == 1
    changed = w.publish(report(minute=10, health=Health.UNHEALTHY))
    assert changed.commit
    assert len(remote.branch_log(BRANCH)) == 2
    assert "health healthy -> unhealthy" in remote.branch_log(BRANCH)[0]


def test_since_and_history_survive_a_restart_of_the_writer(remote: Remote, tmp_path: Path) -> None:
    writer(remote, tmp_path / "w").publish(report(minute=0))
    writer(remote, tmp_path / "w").publish(report(minute=5, blocked=True))
    doc = statusdoc.parse_yaml(remote.show(BRANCH, ".proxyfleet/status.yaml"))
    assert doc is not None
    assert doc["proxies"][0]["since"] == "2026-11-30T12:00:04Z"
    assert [r["started"] for r in doc["runs"]] == ["2026-11-30T12:05:00Z", "2026-11-30T12:00:00Z"]


def test_a_writer_with_a_new_state_dir_takes_nothing_from_the_branch(
    remote: Remote, tmp_path: Path
) -> None:
    writer(remote, tmp_path / "w1").publish(report(minute=0))
    published = writer(remote, tmp_path / "w2").publish(report(minute=5))
    assert published.commit  # the branch does not show this box's last status: none yet
    doc = statusdoc.parse_yaml(remote.show(BRANCH, ".proxyfleet/status.yaml"))
    assert doc is not None
    assert doc["proxies"][0]["since"] == "2026-11-30T12:05:04Z"
    assert [r["started"] for r in doc["runs"]] == ["2026-11-30T12:05:00Z"]


def test_a_rejected_push_is_regenerated_on_top_and_never_forced(
    remote: Remote, tmp_path: Path
) -> None:
    ours = writer(remote, tmp_path / "ours")
    theirs = writer(remote, tmp_path / "theirs")
    ours.publish(report(minute=0))
    real_start = ours._start_from_remote
    calls = []

    def racing_start(repo: object) -> object:
        previous = real_start(repo)  # type: ignore[arg-type]
        if not calls:
            # Another daemon (or a person) pushes between our fetch and our push.
            theirs.publish(report(minute=1, reachable=False))
        calls.append(1)
        return previous

    ours._start_from_remote = racing_start  # type: ignore[method-assign]
    published = ours.publish(report(minute=2, health=Health.UNHEALTHY))
    assert published.commit and not published.error
    assert len(calls) == 2
    subjects = remote.branch_log(BRANCH)
    assert len(subjects) == 3
    assert "host kvm-b unreachable" in git(remote.bare, "log", "-1", "--format=%B", f"{BRANCH}~1")
    ours_body = git(remote.bare, "log", "-1", "--format=%B", BRANCH)
    # ours says what changed since its own last status, and that it writes over theirs
    assert "- proxy web-1: health healthy -> unhealthy" in ours_body
    assert "- the branch did not show this daemon's last status; written again" in ours_body
    assert "kvm-b" not in ours_body
    doc = statusdoc.parse_yaml(remote.show(BRANCH, ".proxyfleet/status.yaml"))
    assert doc is not None
    assert [h["reachable"] for h in doc["hosts"] if h["name"] == "kvm-b"] == [True]


def test_a_push_that_cannot_reach_the_remote_is_reported_not_raised(
    remote: Remote, tmp_path: Path
) -> None:
    w = writer(remote, tmp_path / "w")
    w.publish(report(minute=0))
    remote.bare.rename(remote.bare.with_name("gone.git"))
    published = w.publish(report(minute=5, health=Health.UNHEALTHY))
    assert published.commit == ""
    assert "fetching the status branch failed" in published.error


def test_the_status_can_live_on_the_fleet_branch_itself(remote: Remote, tmp_path: Path) -> None:
    w = writer(remote, tmp_path / "w", branch="main")
    published = w.publish(report())
    assert published.commit
    files = git(remote.bare, "ls-tree", "-r", "--name-only", "main").splitlines()
    assert "fleet.yaml" in files and ".proxyfleet/status.yaml" in files
    assert remote.branch_log("main")[1] == "Initial fleet"


def test_a_commit_message_longer_than_one_argument_may_be_is_committed(
    remote: Remote, tmp_path: Path
) -> None:
    """3 ProxySets of 1,000: one line per new proxy makes a message past MAX_ARG_STRLEN."""
    base = report()
    (proxy,) = base.proxies
    names = [
        f"set-{s}-with-a-name-long-enough-for-a-real-fleet-{i:04d}"
        for s in "abc"
        for i in range(1000)
    ]
    big = replace(base, proxies=tuple(replace(proxy, name=name) for name in names))

    published = writer(remote, tmp_path / "w").publish(big)

    assert not published.error and published.commit
    assert len(published.message.encode()) > 128 * 1024  # a single argv string may not be longer
    body = git(remote.bare, "log", "-1", "--format=%B", BRANCH)
    assert f"- proxy {names[-1]} running on kvm-a, healthy" in body


@pytest.mark.parametrize("kept", ["not json", '{"version": 1, "blob": "x", "doc": {"kind": 1}}'])
def test_a_kept_status_that_does_not_parse_counts_as_none_and_is_written_again(
    remote: Remote, tmp_path: Path, kept: str
) -> None:
    writer(remote, tmp_path / "w").publish(report(minute=0))
    (tmp_path / "w" / LAST_STATUS).write_text(kept)

    published = writer(remote, tmp_path / "w").publish(report(minute=5))

    assert published.commit and not published.error
    assert len(remote.branch_log(BRANCH)) == 2
    assert statusdoc.well_formed(json.loads((tmp_path / "w" / LAST_STATUS).read_text())["doc"])


def test_a_kept_status_that_is_a_link_is_not_followed(remote: Remote, tmp_path: Path) -> None:
    writer(remote, tmp_path / "w").publish(report(minute=0))
    target = tmp_path / "elsewhere.json"
    kept = tmp_path / "w" / LAST_STATUS
    target.write_text(kept.read_text())
    kept.unlink()
    kept.symlink_to(target)

    published = writer(remote, tmp_path / "w").publish(report(minute=5))

    assert published.commit  # the link was not read: nothing kept, so written again
    assert not kept.is_symlink()  # replaced by a file of its own (rename over the link)
