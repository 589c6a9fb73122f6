"""The revision the fleet last applied, and whether a checkout descends from it: what
``proxyfleet apply`` asks before it plans (docs/operations.md, "apply from a checkout").

The daemon writes the fleet's status to the status branch of the fleet repo
(reconciler.adapters.git.statuswriter). ``standing`` fetches that branch from
the checkout's own remote (the one its branch pulls from, else ``origin``), with
the operator's git and credentials and no prompt, into the remote-tracking ref a
plain ``git fetch`` would update; nothing else in the checkout changes. Of the
branch's status.yaml (read with the status writer's bounded loader and shape
check) it takes one field, ``lastAttemptedRevision`` (the last
revision a run acted on; ``lastAppliedRevision`` when that is empty), and
checks it is a commit id; then ``git merge-base --is-ancestor`` tells whether the
checkout's HEAD descends from it. A commit the checkout does not hold is one it
is behind. ``last_status`` fetches the same document whole, for the guard on
hosts removed while they hold VMs (reconciler.engine.guards): the daemon, ``apply``
and ``plan`` read it before they plan. Anyone who can push may write the status
branch: what is read there can only make a run refuse (or say it cannot tell),
never act.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from reconciler.adapters.git.gitsource import redact
from reconciler.core.status.statusdoc import Doc, parse_yaml
from reconciler.model.checkout import Standing
from reconciler.model.settings import StatusSettings

log = logging.getLogger(__name__)

MAX_STATUS_BYTES = 64 * 1024 * 1024
"""A status.yaml larger than this is not read (a fleet of thousands stays far below)."""
_COMMIT = re.compile(r"[0-9a-f]{7,64}")


class _GitFailed(Exception):
    """A git command failed; the message is its last line of stderr."""


def standing(root: Path, status: StatusSettings, *, timeout: float) -> Standing:
    """Where the checkout at ``root`` stands beside the fleet whose daemon writes
    ``status``. Never raises: what cannot be told comes back in ``unknown``.

    Cost: one fetch of the status branch from the checkout's remote (network,
    ``timeout`` seconds at most), and a few local git commands.
    """
    git = _Git(root, timeout)
    try:
        head = git("rev-parse", "--verify", "HEAD^{commit}")
    except _GitFailed:
        return Standing(unknown=f"{root} is not a git checkout")
    if not status.enabled:
        return Standing(checkout=head, unknown="the daemon writes no status (status.enabled)")
    try:
        fleet = _fleet_revision(_fetched_status(git, status), _status_file(status))
    except _GitFailed as exc:
        return Standing(checkout=head, unknown=str(exc))
    try:
        git("merge-base", "--is-ancestor", fleet, head)
    except _GitFailed:  # 1: not an ancestor; 128: a commit this checkout does not hold
        return Standing(checkout=head, fleet=fleet, behind=True)
    return Standing(checkout=head, fleet=fleet)


def last_status(
    root: Path,
    status: StatusSettings,
    *,
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> Doc | None:
    """The status.yaml the fleet's daemon last committed, fetched into the checkout at
    ``root`` as ``standing`` does; None (logged) when there is none or it cannot be read.
    ``env``: git's environment beside this process's (the daemon's key and known_hosts).
    Input from anyone who can push: the removed-host guard reads it only to refuse."""
    if not status.enabled:
        return None
    try:
        return _fetched_status(_Git(root, timeout, env), status)
    except _GitFailed as exc:
        log.info("The fleet's last status is not known: %s.", exc)
        return None


def _fetched_status(git: _Git, status: StatusSettings) -> Doc:
    """status.yaml of the status branch, fetched from the checkout's remote; raises
    _GitFailed saying why there is none."""
    remote = _remote(git)
    ref = f"refs/remotes/{remote}/{status.branch}"
    try:
        git("fetch", "--no-tags", "--quiet", remote, f"+refs/heads/{status.branch}:{ref}")
    except _GitFailed as exc:
        raise _GitFailed(
            f"the status branch {status.branch} was not fetched from {remote}: {exc}"
        ) from exc
    path = _status_file(status)
    where = f"{path} on the status branch"
    try:
        size = int(git("cat-file", "-s", f"{ref}:{path}"))
    except (_GitFailed, ValueError) as exc:
        raise _GitFailed(f"there is no {where}") from exc
    if size > MAX_STATUS_BYTES:
        raise _GitFailed(f"{where} is larger than {MAX_STATUS_BYTES} bytes; not read")
    doc = parse_yaml(git("cat-file", "blob", f"{ref}:{path}"))
    if doc is None:  # the bounded loader, and the shape the status writer checks
        raise _GitFailed(f"{where} is not a status document proxyfleet wrote")
    return doc


def _remote(git: _Git) -> str:
    """The remote the checked-out branch pulls from, else ``origin``."""
    try:
        branch = git("symbolic-ref", "--quiet", "--short", "HEAD")
        remote = git("config", "--get", f"branch.{branch}.remote")
    except _GitFailed:
        return "origin"
    return remote if remote and remote != "." else "origin"


def _status_file(status: StatusSettings) -> str:
    directory = status.path.strip("/")
    return f"{directory}/status.yaml" if directory and directory != "." else "status.yaml"


def _fleet_revision(doc: Doc, path: str) -> str:
    """``lastAttemptedRevision`` (else ``lastAppliedRevision``) of the status ``doc`` (at
    ``path``); raises _GitFailed saying why when there is no such commit id."""
    revision = doc.get("lastAttemptedRevision") or doc.get("lastAppliedRevision")
    if not isinstance(revision, str) or not _COMMIT.fullmatch(revision):
        raise _GitFailed(f"{path} on the status branch names no applied revision yet")
    return revision


class _Git:
    """git in the checkout at ``root``: one command's stdout, stripped; raises _GitFailed."""

    def __init__(self, root: Path, timeout: float, env: Mapping[str, str] | None = None) -> None:
        self._root = root
        self._timeout = timeout
        self._env = {**os.environ, **(env or {}), "GIT_TERMINAL_PROMPT": "0"}

    def __call__(self, *args: str) -> str:
        try:
            done = subprocess.run(
                ["git", "-C", str(self._root), *args],
                capture_output=True,
                text=True,
                env=self._env,
                timeout=self._timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise _GitFailed(f"git {args[0]} did not answer in {self._timeout:g} s") from exc
        except OSError as exc:
            raise _GitFailed(f"git did not run: {exc}") from exc
        if done.returncode != 0:
            lines = [ln.strip() for ln in done.stderr.splitlines() if ln.strip()]
            raise _GitFailed(
                redact(lines[-1]) if lines else f"git {args[0]} exited {done.returncode}"
            )
        return done.stdout.strip()
