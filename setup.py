"""Only the build step that records the git commit in the package (reconciler/buildinfo.py):
everything else is in pyproject.toml."""

from __future__ import annotations

import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithCommit(build_py):
    """build_py, then ``reconciler/BUILD_COMMIT`` in the build: HEAD of the checkout the
    wheel is built from (nothing when it is not one, e.g. an sdist)."""

    def run(self) -> None:
        super().run()
        try:
            done = subprocess.run(
                ["git", "-C", str(Path(__file__).resolve().parent), "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return
        if done.returncode == 0 and done.stdout.strip():
            target = Path(self.build_lib) / "reconciler" / "BUILD_COMMIT"
            target.write_text(done.stdout.strip() + "\n", encoding="ascii")


setup(cmdclass={"build_py": BuildPyWithCommit})
