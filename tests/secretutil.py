"""age identities and secret files for tests, made with the ``age`` tools operators use.

``age`` and ``age-keygen`` come from Debian's ``age`` package (the Makefile installs
it); a test that needs them fails, rather than skips, when they are missing.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path


def tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} is missing: install Debian's age package (make deps does)"
    return found


def make_identity(path: Path) -> str:
    """A new identity file at ``path`` (age-keygen); returns its public key (recipient)."""
    subprocess.run([tool("age-keygen"), "-o", str(path)], check=True, capture_output=True)
    out = subprocess.run(
        [tool("age-keygen"), "-y", str(path)], check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def write_secret(repo: Path, name: str, value: str, recipient: str, *, armor: bool = False) -> Path:
    """``secrets/NAME.age`` in ``repo``: ``value`` encrypted to ``recipient`` by ``age``."""
    target = repo / "secrets" / f"{name}.age"
    target.parent.mkdir(parents=True, exist_ok=True)
    command = [tool("age"), "-r", recipient, "-o", str(target)]
    subprocess.run([*command, *(["-a"] if armor else [])], input=value.encode(), check=True)
    return target
