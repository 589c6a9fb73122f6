"""The Debian 12 (bookworm) root that proves proxyfleet's systemd unit under a real systemd.

The machine runs no systemd as PID 1, so ``tests/integration/test_systemd_unit.py`` boots
this root with systemd as PID 1 in namespaces of its own (``lab/systemdbox.py``). Built
once per recipe, like the Debian 13 host root (``lab/hostroot.py``):
``systemdroot_rootfs.sh`` debootstraps bookworm (minbase) with systemd, dbus, python3,
libvirt's client library, git and ssh, and makes the venv of docs/operations.md at
``/opt/proxyfleet`` with proxyfleet's dependencies in it, from wheels this machine's pip
builds first (the root has no compiler; libvirt-python is built against the machine's
libvirt 9.0, the root's too). The test installs proxyfleet itself into that venv, from the
checkout under test.

Cached as ``systemdroot-bookworm-<key>/`` under the image cache (``lab/rootcache.py``),
keyed by the scripts and pyproject.toml's dependencies. Boxes never write into it (an
overlay takes their writes).
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path
from typing import BinaryIO

from lab.rootcache import Recipe, Root

HERE = Path(__file__).resolve().parent
PYPROJECT = HERE.parent / "pyproject.toml"
SUITE = "bookworm"


def requirements() -> list[str]:
    """proxyfleet's runtime dependencies on a management box, as pyproject.toml lists them:
    the daemon needs the ``libvirt`` extra too (docs/operations.md installs it)."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    extra = project["optional-dependencies"]["libvirt"]
    return [str(item) for item in [*project["dependencies"], *extra]]


RECIPE = Recipe(
    name=f"systemdroot-{SUITE}",
    script=HERE / "systemdroot_rootfs.sh",
    debcache=f"debcache-{SUITE}",
    packages=(("systemd", "systemd"), ("python3", "python3")),
    decides="\n".join(requirements()),
)


def wheels(scratch: Path, log: BinaryIO) -> list[str]:
    """Every wheel the venv needs, built by this machine's pip (its index, its certificates);
    the script installs them with --no-index."""
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(scratch)]
    log.write(f"+ {' '.join([*argv, *requirements()])}\n".encode())
    log.flush()
    subprocess.run([*argv, *requirements()], check=True, stdout=log, stderr=subprocess.STDOUT)
    return [str(scratch), *requirements()]


def build(images_dir: Path) -> Root:
    """The cached root for the current recipe, built first if needed."""
    return RECIPE.build(images_dir, prepare=wheels)


if __name__ == "__main__":
    from lab import config

    built = build(config.IMAGES_DIR)
    state = f"built in {built.seconds:.0f} s" if built.built else "cached"
    print(f"{built.path} ({built.versions}): {state}")
