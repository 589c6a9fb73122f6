"""One contract, two sources: the same cases against ``FakeSource`` and ``GitSource``.

``FakeSource`` stands in for the git source in the daemon's unit tests, so what it hands
out, keeps and refuses must be what ``GitSource`` does. Each case runs against both, as
one story about the remote: the git side pushes to a bare repository in a temporary
directory (real git) and cuts the remote off by moving it away; the fake side sets the
fake's head and failures as a unit test would for the same story.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import pytest
from gitutil import Remote, git, make_remote

from reconciler.adapters.git.fakesource import FakeSource
from reconciler.adapters.git.gitsource import GitSource
from reconciler.errors import SourceError
from reconciler.model.settings import RepoSettings
from reconciler.ports.source import Source


class Side(Protocol):
    source: Source

    def head(self) -> str:
        """The head of the branch on the remote."""

    def push(self) -> str:
        """A new commit on top of the head; returns it."""

    def rewrite(self) -> str:
        """A force-push of a commit that does not descend from the head; returns it."""

    def cut(self) -> None:
        """The remote goes out of reach."""

    def mend(self) -> None:
        """The remote is back."""


class FakeSide:
    def __init__(self, root: Path, *, allow_rollback: bool) -> None:
        root.mkdir()
        (root / "fleet.yaml").write_text("kind: Fleet\n")
        self.fake = FakeSource(root, revision=self._sha("initial"))
        self.source: Source = self.fake
        self.allow_rollback = allow_rollback
        self.count = 0

    def _sha(self, what: str) -> str:
        return hashlib.sha1(what.encode()).hexdigest()

    def head(self) -> str:
        return self.fake.revision

    def push(self) -> str:
        self.count += 1
        self.fake.revision, self.fake.error = self._sha(f"push {self.count}"), ""
        return self.fake.revision

    def rewrite(self) -> str:
        last, new = self.fake.accepted, self._sha(f"rewrite {self.count}")
        self.fake.revision = new
        if self.allow_rollback:
            self.fake.rolled_back_from = last
        else:
            self.fake.error = f"head {new[:12]} does not descend from the last revision"
        return new

    def cut(self) -> None:
        self.fake.fetch_error = "fetching origin branch main failed: no such repository"

    def mend(self) -> None:
        self.fake.fetch_error = ""


class GitSide:
    def __init__(self, remote: Remote, workdir: Path, *, allow_rollback: bool) -> None:
        self.remote = remote
        settings = RepoSettings(url=remote.url, allow_non_fast_forward=allow_rollback)
        self.source = GitSource(settings, workdir)

    def head(self) -> str:
        return git(self.remote.work, "rev-parse", "HEAD")

    def push(self) -> str:
        return self.remote.commit({f"proxies/{self.head()[:8]}.yaml": "kind: Proxy\n"})

    def rewrite(self) -> str:
        work = self.remote.work
        git(work, "reset", "-q", "--hard", "HEAD~1")
        (work / "rewritten.yaml").write_text("kind: Proxy\n")
        git(work, "add", "-A")
        git(work, "commit", "-q", "-m", "Rewritten history")
        git(work, "push", "-q", "--force", "origin", "HEAD:main")
        return self.head()

    def cut(self) -> None:
        self.remote.bare.rename(self.remote.bare.with_name("moved.git"))

    def mend(self) -> None:
        self.remote.bare.with_name("moved.git").rename(self.remote.bare)


MakeSide = Callable[..., Side]


@pytest.fixture(params=["fake", "git"])
def make_side(request: pytest.FixtureRequest, tmp_path: Path) -> MakeSide:
    def make(*, allow_rollback: bool = False) -> Side:
        if request.param == "fake":
            return FakeSide(tmp_path / "repo", allow_rollback=allow_rollback)
        return GitSide(
            make_remote(tmp_path), tmp_path / "state" / "repo", allow_rollback=allow_rollback
        )

    return make


def test_contract_the_first_sync_hands_out_the_head_of_the_branch(make_side: MakeSide) -> None:
    side = make_side()

    checkout = side.source.sync()

    assert (checkout.revision, checkout.fetch_error, checkout.rolled_back_from) == (
        side.head(),
        "",
        "",
    )
    assert (checkout.root / "fleet.yaml").is_file()


def test_contract_a_pushed_commit_is_the_next_revision_in_the_same_root(
    make_side: MakeSide,
) -> None:
    side = make_side()
    first = side.source.sync()

    pushed = side.push()
    second = side.source.sync()

    assert second.revision == pushed != first.revision
    assert second.root == first.root
    assert side.source.sync().revision == pushed  # nothing new: the same revision


def test_contract_a_first_fetch_that_fails_raises_a_source_error(make_side: MakeSide) -> None:
    side = make_side()
    side.cut()

    with pytest.raises(SourceError):
        side.source.sync()


def test_contract_a_failed_fetch_keeps_the_last_good_revision_and_says_why(
    make_side: MakeSide,
) -> None:
    side = make_side()
    good = side.source.sync().revision
    side.push()
    side.cut()

    kept = side.source.sync()
    side.mend()
    back = side.source.sync()

    assert kept.revision == good and kept.fetch_error.startswith("fetching ")
    assert (back.revision, back.fetch_error) == (side.head(), "")


def test_contract_a_head_that_does_not_descend_is_refused_and_the_last_revision_stays(
    make_side: MakeSide,
) -> None:
    side = make_side()
    side.push()
    accepted = side.source.sync().revision
    rewritten = side.rewrite()

    with pytest.raises(SourceError, match="does not descend from") as refused:
        side.source.sync()
    side.cut()
    kept = side.source.sync()

    assert refused.value.revision == rewritten
    assert kept.revision == accepted  # the refused head never became the revision


def test_contract_an_allowed_rollback_names_the_revision_it_left_once(
    make_side: MakeSide,
) -> None:
    side = make_side(allow_rollback=True)
    side.push()
    left = side.source.sync().revision
    rewritten = side.rewrite()

    rolled = side.source.sync()
    again = side.source.sync()

    assert (rolled.revision, rolled.rolled_back_from) == (rewritten, left)
    assert (again.revision, again.rolled_back_from) == (rewritten, "")
