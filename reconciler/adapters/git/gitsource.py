"""The fleet repo through git (GitPython): fetch, verify, hard reset.

The checkout lives in the state dir and belongs to the daemon alone: every
sync fetches the branch, refuses a head that does not descend from the
revision checked out (unless ``allowNonFastForward``: then the checkout names
the revision it rolled back from), optionally verifies it
with ``git verify-commit`` and then makes the work tree exactly that commit
(checkout -B, reset --hard, clean). A failed fetch keeps the last good
checkout; a refused head is never checked out.
"""

from __future__ import annotations

import logging
import re
import shlex
from pathlib import Path

import git
from git.exc import GitCommandError, GitError, InvalidGitRepositoryError, NoSuchPathError

from reconciler.adapters.git import credentials
from reconciler.errors import SourceError
from reconciler.model.checkout import Checkout
from reconciler.model.settings import RepoSettings

log = logging.getLogger(__name__)

_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")


def redact(url: str) -> str:
    """The URL without a ``user:token@`` part, fit for logs and status."""
    return _USERINFO.sub("***@", url)


def git_environment(repo: RepoSettings) -> dict[str, str]:
    """Environment for git commands: no prompts, ssh with our key and known_hosts, and the
    URL's credential, if any (reconciler.adapters.git.credentials: never in .git/config)."""
    ssh = ["ssh", "-o", "BatchMode=yes"]
    if repo.ssh_key_file is not None:
        ssh += ["-i", str(repo.ssh_key_file), "-o", "IdentitiesOnly=yes"]
    if repo.known_hosts_file is not None:
        ssh += [
            "-o",
            f"UserKnownHostsFile={repo.known_hosts_file}",
            "-o",
            "StrictHostKeyChecking=yes",
        ]
    return {
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_SSH_COMMAND": shlex.join(ssh),
        **credentials.environment(repo.url),
    }


def git_message(exc: GitError) -> str:
    """The useful line(s) of a git failure, without GitPython's decoration."""
    if isinstance(exc, GitCommandError):
        text = str(exc.stderr or "").strip()
        text = re.sub(r"^stderr: '", "", text).rstrip("'").strip()
        if not text:
            text = f"git {exc.command[1] if len(exc.command) > 1 else ''} exited {exc.status}"
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        return redact("; ".join(lines[-3:]))
    return redact(str(exc))


def open_or_init(path: Path, url: str, env: dict[str, str], *, bare: bool = False) -> git.Repo:
    """The repo at ``path`` (created, ``bare`` or not, if missing) with ``origin`` at ``url``
    less its credential (``env``, from git_environment, hands that to each command); a
    checkout made before that kept the credential in .git/config and loses it here."""
    url = credentials.public_url(url)
    try:
        repo = git.Repo(path)
    except (InvalidGitRepositoryError, NoSuchPathError):
        path.mkdir(parents=True, exist_ok=True)
        repo = git.Repo.init(path, bare=bare)
    repo.git.update_environment(**env)
    if "origin" not in [r.name for r in repo.remotes]:
        repo.create_remote("origin", url)
    elif repo.remotes.origin.url != url:
        repo.remotes.origin.set_url(url)
    return repo


def head_commit(repo: git.Repo) -> str | None:
    """The commit checked out, or None in a fresh repo."""
    try:
        return str(repo.git.rev_parse("--verify", "-q", "HEAD^{commit}"))
    except GitCommandError:
        return None


def _check_root(workdir: Path, path: str, revision: str) -> None:
    """Refuse a ``path`` that the repo itself turned into a link (it could name any directory
    of the management box): no component may be a symbolic link."""
    current = workdir
    for part in Path(path).parts:
        if part in (".", ""):
            continue
        current = current / part
        if current.is_symlink():
            raise SourceError(
                f"the repo path {path!r} is a symbolic link in the repo at {revision[:12]}; "
                "nothing is read through it",
                revision=revision,
            )


class GitSource:
    """A Source backed by a clone in ``workdir`` of ``settings.url``."""

    def __init__(self, settings: RepoSettings, workdir: Path) -> None:
        self._settings = settings
        self._workdir = workdir
        self._env = git_environment(settings)

    @property
    def workdir(self) -> Path:
        return self._workdir

    def sync(self) -> Checkout:
        s = self._settings
        root = self._workdir / s.path
        try:
            repo = open_or_init(self._workdir, s.url, self._env)
        except (GitError, OSError) as exc:
            raise SourceError(f"cannot prepare the checkout in {self._workdir}: {exc}") from exc
        current = head_commit(repo)
        try:
            repo.git.fetch(
                "--no-tags",
                "origin",
                f"+refs/heads/{s.branch}:refs/remotes/origin/{s.branch}",
                kill_after_timeout=s.fetch_timeout,
            )
        except GitCommandError as exc:
            message = f"fetching {redact(s.url)} branch {s.branch} failed: {git_message(exc)}"
            if current is None:
                raise SourceError(message) from exc
            log.warning("%s; keeping revision %s", message, current[:12])
            return Checkout(revision=current, root=root, fetch_error=message)
        target = str(repo.git.rev_parse(f"refs/remotes/origin/{s.branch}^{{commit}}"))
        rolled_back_from = ""
        if current is not None and target != current and not self._descends(repo, current, target):
            if not s.allow_non_fast_forward:
                raise SourceError(
                    f"head {target[:12]} of branch {s.branch} does not descend from the last "
                    f"revision {current[:12]} (a force-push or a rollback); refused until the "
                    "branch moves forward again (repo.allowNonFastForward allows it)",
                    revision=target,
                )
            rolled_back_from = current
        if s.verify_commits:
            self._verify(repo, target)
        if target != current or repo.is_dirty(untracked_files=True):
            repo.git.checkout("--force", "-B", s.branch, target)
            repo.git.reset("--hard", target)
            repo.git.clean("-ffdx")
            log.info("Checked out revision %s of branch %s.", target[:12], s.branch)
        _check_root(self._workdir, s.path, target)
        return Checkout(revision=target, root=root, rolled_back_from=rolled_back_from)

    def _descends(self, repo: git.Repo, current: str, target: str) -> bool:
        """Whether head ``target`` descends from the revision checked out.

        One that does not (a force-push or a rollback) could bring back proxies (or drop
        them) the fleet had moved past: the daemon stays on ``current`` until the branch
        moves forward again, unless the daemon config allows it.
        """
        try:
            repo.git.merge_base("--is-ancestor", current, target)
        except GitCommandError as exc:
            if exc.status != 1:
                raise SourceError(
                    f"cannot tell whether {target[:12]} descends from {current[:12]}: "
                    f"{git_message(exc)}",
                    revision=target,
                ) from exc
            return False
        return True

    def _verify(self, repo: git.Repo, commit: str) -> None:
        s = self._settings
        args = ["git"]
        if s.allowed_signers_file is not None:
            args += ["-c", f"gpg.ssh.allowedSignersFile={s.allowed_signers_file}"]
        args += ["verify-commit", commit]
        try:
            repo.git.execute(args)
        except GitCommandError as exc:
            detail = git_message(exc)
            if "exited" in detail and not str(exc.stderr or "").strip("'\n stder:"):
                detail = "it is not signed"
            raise SourceError(
                f"head {commit[:12]} of branch {s.branch} refused by verifyCommits: {detail}",
                revision=commit,
            ) from exc
