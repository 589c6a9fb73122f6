"""Status back to the repo: ``<path>/status.yaml`` and ``<path>/STATUS.md`` on the status branch.

The writer keeps a repository of its own in the state dir (bare, no work
tree) and, beside it, the document it last committed
(reconciler.adapters.state.statusstore). Each publish builds the new document
from the run and that last document, fetches the status branch and commits
on top of its tip (or of nothing: an orphan branch) when the fleet's state
changed, or when the branch no longer shows what this box last wrote. What it
commits never comes from the branch: anyone who can push may have written
there. A rejected push is fetched and tried again on top of the new tip, a
bounded number of times; it is never forced. The commit message goes to git
through a file, not its command line: a fleet of thousands makes one longer
than a single argument may be.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field
from pathlib import Path

import git
from git.exc import GitCommandError, GitError
from git.objects import Blob
from gitdb import IStream  # type: ignore[import-untyped]

from reconciler.adapters.git.gitsource import git_environment, git_message, open_or_init, redact
from reconciler.adapters.state.statusstore import LastStatus, StatusStore
from reconciler.core.status import statusdoc
from reconciler.core.status.statusmd import render_markdown
from reconciler.model.checkout import Published
from reconciler.model.report import RunReport
from reconciler.model.settings import RepoSettings, StatusSettings

log = logging.getLogger(__name__)

AUTHOR_NAME = "proxyfleet"
AUTHOR_EMAIL = "proxyfleet@localhost"
_REGULAR_MODES = ("100644", "100755")
LAST_STATUS = "proxyfleet-last-status.json"
"""The document last committed, in the writer's repository (the state dir)."""
_REPLACED = "the branch did not show this daemon's last status; written again"
_REJECTED = ("[rejected]", "non-fast-forward", "fetch first", "failed to update ref", "stale info")


@dataclass
class MemoryStatusSink:
    """A StatusSink for unit tests: keeps documents, commits when meaningful (as the git
    writer does: tests/test_status_sink_contract.py); ``reports`` are all it was given."""

    history: int = 10
    documents: list[statusdoc.Doc] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    reports: list[RunReport] = field(default_factory=list)
    _runs: list[statusdoc.Doc] = field(default_factory=list)

    def publish(self, report: RunReport) -> Published:
        self.reports.append(report)
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
    """A StatusSink committing to ``status.branch`` of the fleet repo's remote.

    The status branch is input from anyone who can push to it: it may hold a
    symlink where STATUS.md belongs, or a status.yaml that is not ours. So the
    writer never checks the branch out and never reads its status.yaml's text
    (only its blob id, to tell whether it is the one this box wrote). It writes the new blobs
    into the object database, builds the tree in a private index file
    (``--replace`` drops whatever stood at those paths, links included) and
    makes the commit with ``commit-tree``. Nothing is written through a work
    tree, so no link on the branch can point a write anywhere.
    """

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
        self._store: StatusStore | None = None
        self._last: LastStatus | None = None

    def publish(self, report: RunReport) -> Published:
        try:
            repo = open_or_init(self._workdir, self._repo_settings.url, self._env, bare=True)
        except (GitError, OSError) as exc:
            return self._failed(f"cannot prepare {self._workdir}: {exc}")
        if self._store is None:
            self._store = StatusStore(Path(repo.git_dir) / LAST_STATUS)
            self._last = self._store.load()
        last = self._last.doc if self._last is not None else None
        if self._runs is None:
            self._runs = list((last or {}).get("runs", []))
        runs = [statusdoc.run_entry(report), *self._runs][: self._settings.history]
        doc = statusdoc.build(report, last, runs=runs)
        error = ""
        for attempt in range(1, self._settings.push_attempts + 1):
            try:
                parent, shown = self._start_from_remote(repo)
            except GitCommandError as exc:
                return self._failed(f"fetching the status branch failed: {git_message(exc)}")
            ours = self._last is not None and shown == self._last.blob
            if ours and statusdoc.meaningful(doc) == statusdoc.meaningful(last):
                self._runs = runs
                return Published()
            message = statusdoc.commit_message(last, doc, extra=() if ours else (_REPLACED,))
            try:
                commit, blob = self._commit(repo, parent, doc, message)
                repo.git.push(
                    "--porcelain",
                    "origin",
                    f"{commit}:refs/heads/{self._settings.branch}",
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
            self._remember(LastStatus(doc=doc, blob=blob))
            log.info("Status committed %s: %s", commit[:12], message.splitlines()[0])
            return Published(commit=commit, message=message)
        return self._failed(
            f"the status push was rejected {self._settings.push_attempts} times: {error}"
        )

    def _remember(self, last: LastStatus) -> None:
        self._last = last
        assert self._store is not None
        try:
            self._store.save(last)
        except OSError as exc:
            log.warning("The last status was not kept in %s: %s", self._store.path, exc)

    def _failed(self, message: str) -> Published:
        log.warning("Status not written: %s", message)
        return Published(error=message)

    def _start_from_remote(self, repo: git.Repo) -> tuple[str, str]:
        """Fetch the remote status branch: its tip and its status.yaml's blob id ('' for
        either when there is none)."""
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
        if not exists:
            return "", ""
        repo.git.fetch(
            "--no-tags",
            "origin",
            f"+refs/heads/{branch}:{remote_ref}",
            kill_after_timeout=self._repo_settings.fetch_timeout,
        )
        parent = str(repo.git.rev_parse("--verify", f"{remote_ref}^{{commit}}"))
        return parent, self._shown(repo, parent)

    def _shown(self, repo: git.Repo, parent: str) -> str:
        """The blob id of ``parent``'s status.yaml when it is a regular file, else ''. Only
        compared with the one this box last wrote: the text itself is never read."""
        listing = str(repo.git.ls_tree(parent, "--", self._file("status.yaml"))).strip()
        # "<mode> <type> <sha>\t<path>"; a link is mode 120000, a directory a tree.
        fields = listing.split("\t", 1)[0].split()
        if len(fields) != 3 or fields[0] not in _REGULAR_MODES or fields[1] != "blob":
            return ""
        return fields[2]

    def _file(self, name: str) -> str:
        directory = self._settings.path.strip("/")
        return f"{directory}/{name}" if directory and directory != "." else name

    def _commit(
        self, repo: git.Repo, parent: str, doc: statusdoc.Doc, message: str
    ) -> tuple[str, str]:
        """A commit of ``parent``'s tree with our two files (re)placed, and the blob id of its
        status.yaml; no work tree involved."""
        blobs = {
            self._file("status.yaml"): statusdoc.dump_yaml(doc),
            self._file("STATUS.md"): render_markdown(doc),
        }
        ids: dict[str, str] = {}
        index = Path(repo.git_dir) / "proxyfleet-status.index"
        message_file = Path(repo.git_dir) / "proxyfleet-status.message"
        index.unlink(missing_ok=True)
        env = {"GIT_INDEX_FILE": str(index)}
        try:
            if parent:
                repo.git.read_tree(parent, env=env)
            else:
                repo.git.read_tree("--empty", env=env)
            for path, text in blobs.items():
                data = text.encode("utf-8")
                stored = repo.odb.store(IStream(Blob.type, len(data), io.BytesIO(data)))
                ids[path] = sha = stored.hexsha.decode("ascii")
                repo.git.update_index(
                    "--add", "--replace", "--cacheinfo", f"100644,{sha},{path}", env=env
                )
            tree = str(repo.git.write_tree(env=env))
            # a file, not -m: one argument may not exceed 128 KiB (MAX_ARG_STRLEN)
            message_file.write_text(message, encoding="utf-8")
            args = [tree, *(["-p", parent] if parent else []), "--no-gpg-sign"]
            commit = str(repo.git.commit_tree(*args, "-F", str(message_file)))
        finally:
            index.unlink(missing_ok=True)
            message_file.unlink(missing_ok=True)
        return commit, ids[self._file("status.yaml")]
