"""The status branch is input from anyone who can push: links and bad documents on it."""

from __future__ import annotations

import os
import threading
from dataclasses import replace
from pathlib import Path

import pytest
from daemonutil import real_daemon, running, wait_until
from gitutil import Remote, git, make_remote
from reports import report

from reconciler.adapters.git.statuswriter import GitStatusWriter
from reconciler.adapters.surface.metrics import Metrics
from reconciler.core.status import statusdoc
from reconciler.model.checkout import Published
from reconciler.model.report import RunReport, RunResult
from reconciler.model.settings import DaemonSettings, ListenSettings, RepoSettings, StatusSettings

BRANCH = "proxyfleet-status"
CANARY = "canary: do not overwrite\n"


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    return make_remote(tmp_path)


def push_status_branch(remote: Remote, build: dict[str, str | Path]) -> None:
    """Push a status branch whose files are ``build``: text, or a Path for a symlink to it."""
    work = remote.work
    git(work, "checkout", "-q", "--orphan", "hostile-status")
    git(work, "rm", "-rq", "--cached", ".")
    for name in os.listdir(work):
        if name != ".git":
            target = work / name
            if target.is_dir() and not target.is_symlink():
                continue
            target.unlink()
    for name, content in build.items():
        path = work / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, Path):
            path.symlink_to(content)
        else:
            path.write_text(content)
    git(work, "add", "-A", *build)
    git(work, "commit", "-q", "-m", "hostile status")
    git(work, "push", "-q", "--force", "origin", f"HEAD:{BRANCH}")
    git(work, "checkout", "-q", "-f", "main")


def canary(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    target = outside / "secret.txt"
    target.write_text(CANARY)
    return target


def writer(remote: Remote, workdir: Path) -> GitStatusWriter:
    return GitStatusWriter(RepoSettings(url=remote.url), StatusSettings(), workdir)


def modes(remote: Remote) -> dict[str, str]:
    lines = git(remote.bare, "ls-tree", "-r", BRANCH).splitlines()
    return {line.split("\t")[1]: line.split()[0] for line in lines}


@pytest.mark.parametrize("linked", [".proxyfleet/STATUS.md", ".proxyfleet/status.yaml"])
def test_a_symlinked_status_file_leaves_its_target_untouched(
    remote: Remote, tmp_path: Path, linked: str
) -> None:
    target = canary(tmp_path)
    other = ".proxyfleet/status.yaml" if linked.endswith(".md") else ".proxyfleet/STATUS.md"
    push_status_branch(remote, {linked: target, other: "x\n"})
    w = writer(remote, tmp_path / "state" / "status")
    published = w.publish(report(created=True))
    assert published.commit and not published.error
    assert target.read_text() == CANARY
    assert modes(remote) == {".proxyfleet/STATUS.md": "100644", ".proxyfleet/status.yaml": "100644"}
    second = w.publish(report(minute=9, reachable=False))
    assert second.commit
    assert target.read_text() == CANARY


def test_a_symlinked_status_directory_leaves_the_directory_it_names_untouched(
    remote: Remote, tmp_path: Path
) -> None:
    target = canary(tmp_path)
    push_status_branch(remote, {".proxyfleet": target.parent})
    published = writer(remote, tmp_path / "state" / "status").publish(report())
    assert published.commit and not published.error
    assert sorted(os.listdir(target.parent)) == ["secret.txt"]
    assert target.read_text() == CANARY
    assert modes(remote) == {".proxyfleet/STATUS.md": "100644", ".proxyfleet/status.yaml": "100644"}


def test_the_writer_keeps_no_work_tree_at_all(remote: Remote, tmp_path: Path) -> None:
    workdir = tmp_path / "state" / "status"
    writer(remote, workdir).publish(report())
    assert git(workdir, "rev-parse", "--is-bare-repository") == "true"
    assert not (workdir / ".proxyfleet").exists()


MALFORMED = {
    "conditions-a-string": "kind: FleetStatus\nconditions: oops\n",
    "condition-without-type": "kind: FleetStatus\nconditions:\n- status: 'True'\n",
    "proxies-a-mapping": "kind: FleetStatus\nproxies: {name: web-1}\n",
    "proxy-name-a-list": "kind: FleetStatus\nproxies:\n- {name: [a], state: x, health: y}\n",
    "hosts-reachable-a-string": "kind: FleetStatus\nhosts:\n- {name: a, reachable: 'yes'}\n",
    "runs-nested": "kind: FleetStatus\nruns:\n- {failed: [[1]]}\n",
    "alias-bomb": "kind: FleetStatus\na0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
    + "".join(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)),
    "deep": "kind: FleetStatus\nruns: " + "[" * 3000 + "]" * 3000 + "\n",
    "not-yaml": "kind: FleetStatus\n\tconditions: [\n",
}


@pytest.mark.parametrize("text", MALFORMED.values(), ids=list(MALFORMED))
def test_a_malformed_previous_status_counts_as_absent(
    remote: Remote, tmp_path: Path, text: str
) -> None:
    push_status_branch(remote, {".proxyfleet/status.yaml": text})
    assert statusdoc.parse_yaml(text) is None
    published = writer(remote, tmp_path / "w").publish(report())
    assert published.commit and not published.error
    doc = statusdoc.parse_yaml(remote.show(BRANCH, ".proxyfleet/status.yaml"))
    assert doc is not None and doc["proxies"][0]["name"] == "web-1"


def test_a_malformed_status_on_the_branch_does_not_end_the_daemon(
    remote: Remote, tmp_path: Path
) -> None:
    push_status_branch(remote, {".proxyfleet/status.yaml": MALFORMED["conditions-a-string"]})
    settings = DaemonSettings(
        repo=RepoSettings(url=remote.url), listen=ListenSettings(port=0), interval=3600
    )
    calls: list[int] = []

    def cycle(stop: threading.Event) -> RunReport:
        calls.append(1)
        return report(minute=len(calls), reachable=len(calls) % 2 == 0)

    daemon = real_daemon(
        settings,
        cycle,
        metrics=Metrics(),
        status=writer(remote, tmp_path / "w"),
        handle_signals=False,
    )
    with running(daemon):
        assert wait_until(lambda: len(daemon.reports) == 1)
        daemon.triggers.fire("webhook")
        assert wait_until(lambda: len(daemon.reports) == 2)
    assert len(remote.branch_log(BRANCH)) == 3


class ExplodingSink:
    def publish(self, report: RunReport) -> Published:
        raise TypeError("string indices must be integers")


def test_a_status_writer_that_raises_is_counted_and_the_daemon_goes_on(tmp_path: Path) -> None:
    settings = DaemonSettings(listen=ListenSettings(port=0), interval=3600)
    daemon = real_daemon(
        settings,
        lambda stop: report(),
        metrics=Metrics(),
        status=ExplodingSink(),
        handle_signals=False,
    )
    with running(daemon):
        assert wait_until(lambda: len(daemon.reports) == 1)
        daemon.triggers.fire("webhook")
        assert wait_until(lambda: len(daemon.reports) == 2)
    text = daemon.metrics.exposition().decode()
    assert 'proxyfleet_report_errors_total{stage="status"} 2.0' in text


FAKE = """\
apiVersion: proxyfleet/v1
kind: FleetStatus
updated: '2026-11-30T11:00:00Z'
observedRevision: fake-revision-of-the-pusher
lastAttemptedRevision: fake-revision-of-the-pusher
lastAppliedRevision: fake-revision-of-the-pusher
suspended: false
conditions: []
hosts: []
proxies:
- {name: web-1, zone: east, host: kvm-a, domain: pf-f-web-1-0123abcd, state: running,
   ip: 10.0.0.5, health: healthy, detail: '', since: '2020-01-01T00:00:00Z'}
- {name: fake-proxy-of-the-pusher, zone: east, host: kvm-a, domain: pf-f-fake-1, state: running,
   ip: 10.9.9.9, health: healthy, detail: '', since: '2020-01-01T00:00:00Z'}
blocked: []
abandoned: []
runs:
- {started: '2026-11-30T11:00:00Z', result: Success, problems: [words-of-the-pusher]}
"""
PUSHED = ("fake-proxy-of-the-pusher", "fake-revision-of-the-pusher", "words-of-the-pusher", "2020-")


def stalled(minute: int) -> RunReport:
    """A run that observed nothing (the repo did not load): the last picture holds."""
    return replace(
        report(minute=minute, result=RunResult.STALLED, problems=("p.yaml:1:1: broken",)),
        plan=None,
        proxies=(),
        hosts=(),
    )


@pytest.mark.parametrize("published_before", [True, False], ids=["after-a-status", "first"])
def test_a_pushed_fake_proxy_entry_is_not_carried_into_the_daemons_next_commit(
    remote: Remote, tmp_path: Path, published_before: bool
) -> None:
    w = writer(remote, tmp_path / "state" / "status")
    if published_before:
        assert w.publish(report(minute=0)).commit
    assert statusdoc.parse_yaml(FAKE) is not None  # well-formed: only its origin is wrong
    push_status_branch(remote, {".proxyfleet/status.yaml": FAKE})

    published = w.publish(stalled(minute=5))

    assert published.commit and not published.error
    text = remote.show(BRANCH, ".proxyfleet/status.yaml")
    text += remote.show(BRANCH, ".proxyfleet/STATUS.md") + published.message
    for pushed in PUSHED:
        assert pushed not in text
    doc = statusdoc.parse_yaml(remote.show(BRANCH, ".proxyfleet/status.yaml"))
    assert doc is not None
    assert [p["name"] for p in doc["proxies"]] == (["web-1"] if published_before else [])
