"""Real git repositories for tests: a bare remote and a work tree that pushes to it."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

AUTHOR = {
    "GIT_AUTHOR_NAME": "Operator",
    "GIT_AUTHOR_EMAIL": "operator@example.org",
    "GIT_COMMITTER_NAME": "Operator",
    "GIT_COMMITTER_EMAIL": "operator@example.org",
}


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    full = {**os.environ, **AUTHOR, **(env or {})}
    out = subprocess.run(
        ["git", *args], cwd=cwd, env=full, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {out.stderr}")
    return out.stdout.strip()


@dataclass
class Remote:
    """A bare repository (``bare``) and an operator's clone of it (``work``)."""

    bare: Path
    work: Path

    @property
    def url(self) -> str:
        return f"file://{self.bare}"

    def commit(self, files: dict[str, str], message: str = "change", *, sign: bool = False) -> str:
        for name, text in files.items():
            path = self.work / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        git(self.work, "add", "-A")
        git(self.work, "commit", "-q", *(["-S"] if sign else []), "-m", message)
        git(self.work, "push", "-q", "origin", "HEAD:main")
        return git(self.work, "rev-parse", "HEAD")

    def branch_log(self, branch: str) -> list[str]:
        """Commit subjects of ``branch`` on the remote, newest first ([] if missing)."""
        try:
            return git(self.bare, "log", "--format=%s", branch).splitlines()
        except AssertionError:
            return []

    def show(self, branch: str, path: str) -> str:
        return git(self.bare, "show", f"{branch}:{path}")


def make_remote(tmp: Path) -> Remote:
    bare = tmp / "remote.git"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
    work = tmp / "operator"
    git(tmp, "clone", "-q", str(bare), str(work))
    git(work, "checkout", "-q", "-b", "main")
    remote = Remote(bare=bare, work=work)
    remote.commit({"fleet.yaml": "kind: Fleet\n"}, "Initial fleet")
    return remote
