"""The commit a checkout has out, as ``apply`` names it in its report: git asked in two
processes at once (the commit, local changes), started early so that it answers while the
repo loads."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

GIT_TIMEOUT = 10.0
"""Seconds git has to answer."""


def start_revision(root: Path) -> Callable[[], str]:
    """Ask git, in two processes at once, for the commit checked out at ``root`` and
    whether it has local changes; the call returned (once) waits for both and answers the commit
    ("+dirty" when it has local changes), or "" (no git, not a checkout, no answer in
    ``GIT_TIMEOUT`` seconds)."""
    git = ("git", "-C", str(root))
    asks = (("rev-parse", "HEAD"), ("status", "--porcelain", "--", "."))
    running: list[subprocess.Popen[str]] = []
    try:
        for ask in asks:
            running.append(
                subprocess.Popen(
                    [*git, *ask], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
                )
            )
    except OSError:
        for process in running:
            process.kill()
            process.wait()
        return lambda: ""

    def answer() -> str:
        head, dirty = [_git_output(process) for process in running]
        if head is None or dirty is None:
            return ""
        return f"{head}+dirty" if dirty else head

    return answer


def _git_output(process: subprocess.Popen[str]) -> str | None:
    """What ``process`` printed, stripped; None when it failed or did not end in time."""
    try:
        out, _ = process.communicate(timeout=GIT_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        return None
    return out.strip() if process.returncode == 0 else None
