"""Status back to the repo: ``<path>/status.yaml`` and ``<path>/STATUS.md`` on the status branch.

The writer keeps a clone of its own in the state dir. Each publish fetches the
status branch, starts from its tip (or from nothing: an orphan branch), reads
the previous status.yaml, builds the new one and commits only when something
meaningful changed. A rejected push is fetched, regenerated on top of the new
tip and pushed again, a bounded number of times; it is never forced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import git
from git.exc import GitCommandError, GitError

from reconciler.adapters.gitsource import git_environment, git_message, open_or_init, redact
from reconciler.core import statusdoc
from reconciler.core.statusmd import render_markdown
from reconciler.model.report import RunReport
from reconciler.model.settings import RepoSettings, StatusSettings

log = logging.getLogger(__name__)

AUTHOR_NAME = "proxyfleet"
AUTHOR_EMAIL = "proxyfleet@localhost"
_REJECTED = ("[rejected]", "non-fast-forward", "fetch first", "failed to update ref", "stale info")


@dataclass(frozen=True, slots=True)
class Published:
    """What a publish did: ``commit`` is set when a commit reached the remote."""

    commit: str = ""
    message: str = ""
    error: str = ""


class StatusSink(Protocol):
    def publish(self, report: RunReport) -> Published:
        """Record ``report``; commit and push when something meaningful changed.

        Cost: one fetch, and a commit + push when the status changed. Never
        raises for git or network failures: they come back in ``error``.
        """
        ...


@dataclass
class MemoryStatusSink:
    """A StatusSink for unit tests: keeps documents, commits when meaningful."""

    history: int = 10
    documents: list[statusdoc.Doc] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    _runs: list[statusdoc.Doc] = field(default_factory=list)

    def publish(self, report: RunReport) -> Published:
        previous = self.documents[-1] if self.documents else None
        self._runs = [statusdoc.run_entry(report), *self._runs][: self.history]
        doc = statusdoc.build(report, previous, runs=self._runs)
        if statusdoc.meaningful(doc) == statusdoc.meaningful(previous):
            return Published()
        message = statusdoc.commit_message(previous, doc)
        self.documents.append(doc)
        self.messages.append(message)
        return Published(commit=f"{len(self.documents):040x}", message=message)


class GitStatusWriter:
    """A StatusSink committing to ``status.branch`` of the fleet repo's remote."""

    def __init__(self, repo: RepoSettings, status: StatusSettings, workdir: Path) -> None:
        self._repo_settings = repo
        self._settings = status
        self._workdir = workdir
        self._env = {
            **git_environment(repo),
            "GIT_AUTHOR_NAME": AUTHOR_NAME,
            "GIT_AUTHOR_EMAIL": AUTHOR_EMAIL,
            "GIT_COMMITTER_NAME": AUTHOR_NAME,
            "GIT_COMMITTER_EMAIL": AUTHOR_EMAIL,
        }
        self._runs: list[statusdoc.Doc] | None = None

    def publish(self, report: RunReport) -> Published:
        entry = statusdoc.run_entry(report)
        try:
            repo = open_or_init(self._workdir, self._repo_settings.url, self._env)
        except (GitError, OSError) as exc:
            return self._failed(f"cannot prepare {self._workdir}: {exc}")
        error = ""
        for attempt in range(1, self._settings.push_attempts + 1):
            try:
                previous = self._start_from_remote(repo)
            except GitCommandError as exc:
                return self._failed(f"fetching the status branch failed: {git_message(exc)}")
            if self._runs is None:
                self._runs = list((previous or {}).get("runs", []))
            runs = [entry, *self._runs][: self._settings.history]
            doc = statusdoc.build(report, previous, runs=runs)
            if statusdoc.meaningful(doc) == statusdoc.meaningful(previous):
                self._runs = runs
                return Published()
            message = statusdoc.commit_message(previous, doc)
            try:
                commit = self._commit(repo, doc, message)
                repo.git.push(
                    "--porcelain",
                    "origin",
                    f"HEAD:refs/heads/{self._settings.branch}",
                    kill_after_timeout=self._repo_settings.fetch_timeout,
                )
            except GitCommandError as exc:
                error = git_message(exc)
                text = f"{exc.stdout or ''} {exc.stderr or ''}"
                if any(marker in text for marker in _REJECTED):
                    log.info("Status push rejected (attempt %d); regenerating on top.", attempt)
                    continue
                return self._failed(
                    f"pushing the status to {redact(self._repo_settings.url)}: {error}"
                )
            self._runs = runs
            log.info("Status committed %s: %s", commit[:12], message.splitlines()[0])
            return Published(commit=commit, message=message)
        return self._failed(
            f"the status push was rejected {self._settings.push_attempts} times: {error}"
        )

    def _failed(self, message: str) -> Published:
        log.warning("Status not written: %s", message)
        return Published(error=message)

    def _start_from_remote(self, repo: git.Repo) -> statusdoc.Doc | None:
        """Make the work tree the remote status branch (or empty) and read status.yaml."""
        branch = self._settings.branch
        remote_ref = f"refs/remotes/origin/{branch}"
        exists = bool(
            str(
                repo.git.ls_remote(
                    "--heads",
                    "origin",
                    f"refs/heads/{branch}",
                    kill_after_timeout=self._repo_settings.fetch_timeout,
                )
            ).strip()
        )
        if exists:
            repo.git.fetch(
                "--no-tags",
                "origin",
                f"+refs/heads/{branch}:{remote_ref}",
                kill_after_timeout=self._repo_settings.fetch_timeout,
            )
            repo.git.checkout("--force", "-B", branch, remote_ref)
            repo.git.reset("--hard", remote_ref)
        else:
            repo.git.symbolic_ref("HEAD", f"refs/heads/{branch}")
            repo.git.update_ref("-d", f"refs/heads/{branch}")
            repo.git.read_tree("--empty")
        repo.git.clean("-ffdx")
        status_file = self._workdir / self._settings.path / "status.yaml"
        if not status_file.is_file():
            return None
        return statusdoc.parse_yaml(status_file.read_text(encoding="utf-8"))

    def _commit(self, repo: git.Repo, doc: statusdoc.Doc, message: str) -> str:
        directory = self._workdir / self._settings.path
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "status.yaml").write_text(statusdoc.dump_yaml(doc), encoding="utf-8")
        (directory / "STATUS.md").write_text(render_markdown(doc), encoding="utf-8")
        repo.git.add("--", self._settings.path)
        repo.git.commit("--quiet", "--no-gpg-sign", "--no-verify", "-m", message)
        return str(repo.git.rev_parse("HEAD"))
