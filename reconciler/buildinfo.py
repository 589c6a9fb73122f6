"""Which proxyfleet this is: the version (``reconciler.__version__``, the one source of
pyproject's) and the git commit it was built from.

The commit comes from, first: git itself, when the package runs from a checkout (an
editable install, ``make test``'s venv, ``python -m reconciler`` in a clone), so a
checkout always names the commit it has now; else the ``BUILD_COMMIT`` file that
``setup.py`` writes into the package when a wheel is built from a checkout (``pip
install .``, ``pipx install .``); else ``unknown`` (a wheel built from an sdist, which
carries no history). ``--version`` and ``proxyfleet_build_info`` say which.
"""

from __future__ import annotations

import functools
import subprocess
from dataclasses import dataclass
from pathlib import Path

from reconciler import __version__

PACKAGE = Path(__file__).resolve().parent
BUILD_COMMIT = PACKAGE / "BUILD_COMMIT"
"""Written by ``setup.py``'s build step: the commit, a newline."""
GIT_SECONDS = 5.0
"""How long ``git rev-parse`` may take before the commit is "unknown"."""


@dataclass(frozen=True, slots=True)
class Build:
    version: str
    commit: str
    """40 hex digits, ``-dirty`` appended when a checkout has uncommitted changes to
    tracked files; or ``unknown``."""
    source: str
    """Where ``commit`` came from: ``git`` (a checkout), ``build`` (the wheel's file) or
    ``none``."""

    def line(self) -> str:
        """``proxyfleet 0.3.0 (commit 1c6b26c0a1b2, from git)``."""
        short = self.commit[:12] + ("-dirty" if self.commit.endswith("-dirty") else "")
        if self.source == "none":
            return f"proxyfleet {self.version} (commit unknown)"
        return f"proxyfleet {self.version} (commit {short}, from {self.source})"


@functools.cache
def build() -> Build:
    """This installation's version and commit (asked once per process)."""
    checkout = PACKAGE.parent
    if (checkout / ".git").exists():
        commit = git_commit(checkout)
        if commit:
            return Build(__version__, commit, "git")
    try:
        recorded = BUILD_COMMIT.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        recorded = ""
    if recorded:
        return Build(__version__, recorded, "build")
    return Build(__version__, "unknown", "none")


def git_commit(checkout: Path) -> str:
    """HEAD of the checkout at ``checkout`` (``-dirty`` when tracked files changed), or ""
    when git is missing or refuses (another user's checkout without ``safe.directory``)."""
    base = ["git", "-c", f"safe.directory={checkout}", "-C", str(checkout)]
    try:
        head = subprocess.run(
            [*base, "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=GIT_SECONDS,
            check=False,
        )
        if head.returncode != 0:
            return ""
        dirty = subprocess.run(
            [*base, "diff", "--quiet", "HEAD", "--", "reconciler"],
            capture_output=True,
            timeout=GIT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return head.stdout.strip() + ("-dirty" if dirty.returncode == 1 else "")
