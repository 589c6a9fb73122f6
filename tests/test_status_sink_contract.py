"""One contract, two status sinks: the same cases against ``MemoryStatusSink`` and
``GitStatusWriter``.

The memory sink stands in for the git writer in the daemon's unit tests, so when it
"commits", and what it says in the message and the document, must be what the writer
pushes. Each case runs against both: the writer pushes to a bare repository in a
temporary directory (real git), and its document is read back from the status branch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import pytest
from gitutil import Remote, make_remote
from reports import report

from reconciler.adapters.git.statuswriter import GitStatusWriter, MemoryStatusSink
from reconciler.core.status import statusdoc
from reconciler.model.report import Health
from reconciler.model.settings import RepoSettings, StatusSettings
from reconciler.ports.status import StatusSink

HISTORY = 3


class Side(Protocol):
    sink: StatusSink

    def document(self) -> Any:
        """The status document last committed."""


class MemorySide:
    def __init__(self) -> None:
        self.memory = MemoryStatusSink(history=HISTORY)
        self.sink: StatusSink = self.memory

    def document(self) -> Any:
        return self.memory.documents[-1]


class GitSide:
    def __init__(self, remote: Remote, workdir: Path) -> None:
        self.remote = remote
        settings = StatusSettings(history=HISTORY)
        self.path = f"{settings.path}/status.yaml"
        self.branch = settings.branch
        self.sink = GitStatusWriter(RepoSettings(url=remote.url), settings, workdir)

    def document(self) -> Any:
        return statusdoc.parse_yaml(self.remote.show(self.branch, self.path))


@pytest.fixture(params=["memory", "git"])
def side(request: pytest.FixtureRequest, tmp_path: Path) -> Side:
    if request.param == "memory":
        return MemorySide()
    return GitSide(make_remote(tmp_path), tmp_path / "state" / "status")


def test_contract_the_first_run_is_committed_with_what_it_found(side: Side) -> None:
    published = side.sink.publish(report(created=True))

    assert published.commit and not published.error
    assert "- proxy web-1 running on kvm-a, healthy" in published.message
    (proxy,) = side.document()["proxies"]
    assert (proxy["name"], proxy["state"], proxy["health"]) == ("web-1", "running", "healthy")


def test_contract_an_idle_run_commits_nothing_and_a_change_commits_saying_what_changed(
    side: Side,
) -> None:
    side.sink.publish(report(minute=0))

    idle = side.sink.publish(report(minute=5))
    changed = side.sink.publish(report(minute=10, health=Health.UNHEALTHY))

    assert (idle.commit, idle.error) == ("", "")
    assert changed.commit and changed.commit != idle.commit
    assert "health healthy -> unhealthy" in changed.message
    assert side.document()["proxies"][0]["health"] == "unhealthy"


def test_contract_a_commit_keeps_the_last_runs_up_to_the_history(side: Side) -> None:
    for minute, health in enumerate((Health.HEALTHY, Health.UNHEALTHY) * 3):
        side.sink.publish(report(minute=minute * 5, health=health))

    runs = side.document()["runs"]

    assert [r["started"] for r in runs] == [
        "2026-11-30T12:25:00Z",
        "2026-11-30T12:20:00Z",
        "2026-11-30T12:15:00Z",
    ]
