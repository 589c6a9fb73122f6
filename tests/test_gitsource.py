from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from gitutil import Remote, git, make_remote

from reconciler.adapters.git.gitsource import GitSource, redact
from reconciler.errors import SourceError
from reconciler.model.settings import RepoSettings


@pytest.fixture
def remote(tmp_path: Path) -> Remote:
    return make_remote(tmp_path)


def source_for(remote: Remote, tmp_path: Path, **kw: object) -> GitSource:
    settings = RepoSettings(url=remote.url, branch="main", **kw)  # type: ignore[arg-type]
    return GitSource(settings, tmp_path / "state" / "repo")


def test_first_sync_checks_out_the_head_of_the_branch(remote: Remote, tmp_path: Path) -> None:
    head = git(remote.work, "rev-parse", "HEAD")
    checkout = source_for(remote, tmp_path).sync()
    assert checkout.revision == head
    assert (checkout.root / "fleet.yaml").read_text() == "kind: Fleet\n"
    assert checkout.fetch_error == ""


def test_a_pushed_commit_is_the_next_revision_and_local_edits_are_wiped(
    remote: Remote, tmp_path: Path
) -> None:
    source = source_for(remote, tmp_path)
    first = source.sync()
    (first.root / "fleet.yaml").write_text("tampered\n")
    (first.root / "stray.yaml").write_text("x: 1\n")
    second_rev = remote.commit({"proxies/a.yaml": "kind: Proxy\n"}, "Add a")
    second = source.sync()
    assert second.revision == second_rev != first.revision
    assert (second.root / "fleet.yaml").read_text() == "kind: Fleet\n"
    assert (second.root / "proxies" / "a.yaml").exists()
    assert not (second.root / "stray.yaml").exists()


def test_the_repo_path_points_into_a_subdirectory(remote: Remote, tmp_path: Path) -> None:
    remote.commit({"fleets/prod/fleet.yaml": "kind: Fleet\n"}, "Move")
    checkout = source_for(remote, tmp_path, path="fleets/prod").sync()
    assert checkout.root.name == "prod"
    assert (checkout.root / "fleet.yaml").exists()


def test_a_failed_fetch_keeps_the_last_good_revision_and_reports_it(
    remote: Remote, tmp_path: Path
) -> None:
    source = source_for(remote, tmp_path)
    good = source.sync()
    remote.bare.rename(remote.bare.with_name("moved.git"))
    again = source.sync()
    assert again.revision == good.revision
    assert "fetching file://" in again.fetch_error
    assert "failed" in again.fetch_error


def test_a_first_fetch_that_fails_raises_a_source_error(tmp_path: Path) -> None:
    source = GitSource(RepoSettings(url=f"file://{tmp_path}/nothing.git"), tmp_path / "repo")
    with pytest.raises(SourceError, match=r"nothing\.git branch main failed"):
        source.sync()


def test_a_missing_branch_is_a_source_error(remote: Remote, tmp_path: Path) -> None:
    source = GitSource(RepoSettings(url=remote.url, branch="prod"), tmp_path / "repo")
    with pytest.raises(SourceError, match="branch prod"):
        source.sync()


def test_credentials_in_a_url_never_reach_messages() -> None:
    assert redact("https://bot:s3cret@git.example.org/fleet.git") == (
        "https://***@git.example.org/fleet.git"
    )


def _signing_key(tmp_path: Path, name: str) -> Path:
    key = tmp_path / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True
    )
    return key


@pytest.fixture
def signed(remote: Remote, tmp_path: Path) -> tuple[Remote, Path, Path]:
    trusted = _signing_key(tmp_path, "trusted")
    stranger = _signing_key(tmp_path, "stranger")
    signers = tmp_path / "allowed_signers"
    pub = (trusted.with_suffix(".pub")).read_text().split()
    signers.write_text(f"operator@example.org {pub[0]} {pub[1]}\n")
    git(remote.work, "config", "gpg.format", "ssh")
    git(remote.work, "config", "user.signingkey", str(trusted))
    return remote, signers, stranger


def test_verify_commits_accepts_a_head_signed_by_an_allowed_signer(
    signed: tuple[Remote, Path, Path], tmp_path: Path
) -> None:
    remote, signers, _ = signed
    rev = remote.commit({"a.yaml": "a: 1\n"}, "Signed", sign=True)
    source = source_for(remote, tmp_path, verify_commits=True, allowed_signers_file=signers)
    assert source.sync().revision == rev


def test_verify_commits_refuses_an_unsigned_head_and_keeps_the_old_tree(
    signed: tuple[Remote, Path, Path], tmp_path: Path
) -> None:
    remote, signers, _ = signed
    good = remote.commit({"a.yaml": "a: 1\n"}, "Signed", sign=True)
    source = source_for(remote, tmp_path, verify_commits=True, allowed_signers_file=signers)
    source.sync()
    bad = remote.commit({"a.yaml": "a: 2\n"}, "Unsigned")
    with pytest.raises(SourceError, match="refused by verifyCommits: it is not signed") as err:
        source.sync()
    assert err.value.revision == bad
    assert git(source.workdir, "rev-parse", "HEAD") == good
    assert (source.workdir / "a.yaml").read_text() == "a: 1\n"


def test_verify_commits_refuses_a_head_signed_by_an_unknown_key(
    signed: tuple[Remote, Path, Path], tmp_path: Path
) -> None:
    remote, signers, stranger = signed
    git(remote.work, "config", "user.signingkey", str(stranger))
    remote.commit({"a.yaml": "a: 3\n"}, "Signed by a stranger", sign=True)
    source = source_for(remote, tmp_path, verify_commits=True, allowed_signers_file=signers)
    with pytest.raises(SourceError, match="refused by verifyCommits") as err:
        source.sync()
    assert "not signed" not in str(err.value)


def test_a_repo_path_that_the_repo_made_a_symlink_is_refused(
    remote: Remote, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "box-secrets"
    elsewhere.mkdir()
    (elsewhere / "fleet.yaml").write_text("kind: Fleet\n")
    (remote.work / "fleet").symlink_to(elsewhere)
    head = remote.commit({}, "fleet is a link now")
    with pytest.raises(SourceError, match="'fleet' is a symbolic link") as caught:
        source_for(remote, tmp_path, path="fleet").sync()
    assert caught.value.revision == head


def test_a_force_pushed_branch_is_refused_and_the_old_tree_stays(
    remote: Remote, tmp_path: Path
) -> None:
    source = source_for(remote, tmp_path)
    first = remote.commit({"proxies/a.yaml": "kind: Proxy\n"}, "Add a")
    assert source.sync().revision == first
    git(remote.work, "reset", "-q", "--hard", "HEAD~1")
    (remote.work / "proxies").mkdir()
    (remote.work / "proxies" / "b.yaml").write_text("kind: Proxy\n")
    git(remote.work, "add", "-A")
    git(remote.work, "commit", "-q", "-m", "Rewritten history")
    git(remote.work, "push", "-q", "--force", "origin", "HEAD:main")
    rolled = git(remote.work, "rev-parse", "HEAD")
    with pytest.raises(SourceError, match="does not descend from") as caught:
        source.sync()
    assert caught.value.revision == rolled
    assert (tmp_path / "state" / "repo" / "proxies" / "a.yaml").exists()
    assert not (tmp_path / "state" / "repo" / "proxies" / "b.yaml").exists()


def test_a_force_push_is_accepted_when_the_daemon_config_allows_it(
    remote: Remote, tmp_path: Path
) -> None:
    source = source_for(remote, tmp_path, allow_non_fast_forward=True)
    added = remote.commit({"proxies/a.yaml": "kind: Proxy\n"}, "Add a")
    assert source.sync().rolled_back_from == ""
    git(remote.work, "reset", "-q", "--hard", "HEAD~1")
    git(remote.work, "push", "-q", "--force", "origin", "HEAD:main")
    rolled = source.sync()
    assert rolled.revision == git(remote.work, "rev-parse", "HEAD")
    assert rolled.rolled_back_from == added  # the cycle's warning names both
    assert source.sync().rolled_back_from == ""  # once: the next sync is no rollback


def test_a_fast_forward_is_accepted(remote: Remote, tmp_path: Path) -> None:
    source = source_for(remote, tmp_path)
    source.sync()
    second = remote.commit({"proxies/a.yaml": "kind: Proxy\n"}, "Add a")
    assert source.sync().revision == second
