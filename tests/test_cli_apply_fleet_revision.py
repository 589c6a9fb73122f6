"""``apply`` knows the fleet's revision: a checkout behind the revision the daemon last
applied (its status branch says which) is refused naming both, unless --allow-older; a
checkout ahead goes on; without a status branch it says so and goes on. Real git: a bare
remote on disk, the daemon's own status writer, an operator's clone and a laptop's."""

from __future__ import annotations

from pathlib import Path

import pytest
from enginefakes import FleetRepo
from gitutil import Remote, git, make_remote
from reports import report

from reconciler.adapters.git.fleetrevision import standing
from reconciler.adapters.git.statuswriter import GitStatusWriter
from reconciler.cli import apply, build_parser
from reconciler.model.settings import RepoSettings, StatusSettings


class Fleet:
    """The operator's clone holding a fleet repo, a laptop's clone of it, and the daemon's
    status writer publishing to the same remote."""

    def __init__(self, tmp: Path) -> None:
        self.remote: Remote = make_remote(tmp)
        self.world = FleetRepo(self.remote.work)
        self.first = self.remote.commit({}, "Three proxies")
        self.laptop = tmp / "laptop"
        git(tmp, "clone", "-q", str(self.remote.bare), str(self.laptop))
        self.world.write(("kvm01", "kvm02"), ("web-1", "web-2", "web-3", "web-4"))
        self.second = self.remote.commit({}, "A fourth proxy")
        self.status = GitStatusWriter(
            RepoSettings(url=self.remote.url), StatusSettings(), tmp / "daemon-status"
        )

    def daemon_applied(self, revision: str) -> None:
        published = self.status.publish(report(revision=revision))
        assert published.commit and not published.error

    def apply(self, root: Path, *flags: str) -> int:
        args = build_parser().parse_args(["apply", "--repo", str(root), "--yes", *flags])
        return apply.apply_with(
            args,
            self.world.engine,
            revision=lambda: git(root, "rev-parse", "HEAD"),
            standing=lambda: standing(root, StatusSettings(), timeout=30.0),
        )


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    return Fleet(tmp_path)


def test_a_checkout_behind_the_fleet_is_refused_naming_both_revisions_and_applies_nothing(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.daemon_applied(fleet.second)

    code = fleet.apply(fleet.laptop)

    err = capsys.readouterr().err
    assert code == 1
    assert (
        f"your checkout {fleet.first[:12]} is behind the fleet's {fleet.second[:12]}; "
        "pull, or pass --allow-older"
    ) in err
    assert fleet.world.mutating_calls() == []
    assert fleet.world.made == []  # no host was dialled


def test_a_behind_checkout_goes_on_after_a_pull(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.daemon_applied(fleet.second)
    git(fleet.laptop, "pull", "-q", "--ff-only")

    assert fleet.apply(fleet.laptop) == 0
    assert "behind" not in capsys.readouterr().err
    assert len(fleet.world.mutating_calls()) == 6  # two image uploads, four creates


def test_a_checkout_ahead_of_the_fleet_proceeds(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.daemon_applied(fleet.first)

    code = fleet.apply(fleet.remote.work)

    assert code == 0
    assert capsys.readouterr().err == ""
    assert len(fleet.world.mutating_calls()) == 6


def test_without_a_status_branch_apply_says_so_in_one_line_and_proceeds(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    code = fleet.apply(fleet.laptop)

    err = capsys.readouterr().err
    assert code == 0
    assert err.count("\n") == 1
    assert "the fleet's revision is not known (the status branch proxyfleet-status" in err
    assert "going on without comparing" in err
    assert len(fleet.world.mutating_calls()) == 5  # the laptop's three proxies


def test_allow_older_applies_a_behind_checkout_and_says_it_is_behind(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    fleet.daemon_applied(fleet.second)

    code = fleet.apply(fleet.laptop, "--allow-older")

    err = capsys.readouterr().err
    assert code == 0
    assert f"behind the fleet's {fleet.second[:12]}; going on (--allow-older)" in err
    assert len(fleet.world.mutating_calls()) == 5


def test_a_fleet_revision_the_checkout_does_not_hold_counts_as_behind(
    fleet: Fleet,
) -> None:
    fleet.daemon_applied(fleet.second)
    git(fleet.laptop, "commit", "-q", "--allow-empty", "-m", "local work")
    git(fleet.laptop, "checkout", "-q", "--detach")  # no upstream: the remote is origin

    where = standing(fleet.laptop, StatusSettings(), timeout=30.0)

    assert where.behind and where.fleet == fleet.second and where.unknown == ""
    with pytest.raises(AssertionError, match="git cat-file"):
        git(fleet.laptop, "cat-file", "-e", fleet.second)  # the status fetch did not bring it


def test_a_directory_that_is_not_a_checkout_is_not_compared(tmp_path: Path) -> None:
    where = standing(tmp_path, StatusSettings(), timeout=30.0)
    assert not where.behind and "is not a git checkout" in where.unknown


def test_a_status_branch_someone_else_wrote_is_not_believed_and_apply_goes_on(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    work = fleet.remote.work
    git(work, "checkout", "-q", "--orphan", "forged")
    git(work, "rm", "-q", "-rf", ".")
    (work / ".proxyfleet").mkdir()
    (work / ".proxyfleet" / "status.yaml").write_text("lastAttemptedRevision: [not, a, commit]\n")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "forged status")
    git(work, "push", "-q", "origin", "HEAD:proxyfleet-status")

    code = fleet.apply(fleet.laptop)

    assert code == 0
    assert "is not a status document proxyfleet wrote" in capsys.readouterr().err
