"""Debootstrapped roots cached in the image cache, one directory per recipe.

A recipe is a shell script (sourcing ``rootfs_base.sh``) that builds a tree as root inside
a private mount and PID namespace, plus whatever else decides the tree's content (the
suite, a list of Python requirements). Its key is the sha256 of all that; the tree is
``<name>-<key[:12]>/`` under the image cache (shared by every lab instance) and the
``.json`` beside it, written last, marks it complete (versions, build seconds). Builds run
under a lock, so parallel sessions build once. Users never write into a tree: they mount
it as the lower layer of an overlay of their own.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from lab.imagebuild import apt_mirrors

HERE = Path(__file__).resolve().parent
BASE = HERE / "rootfs_base.sh"

Prepare = Callable[[Path, BinaryIO], list[str]]
"""Work before the script runs, in a scratch directory removed after the build (the log to
write to); returns more arguments for the script."""


@dataclass(frozen=True)
class Root:
    path: Path
    key: str
    built: bool
    seconds: float
    versions: str
    """``libvirt 11.3.0, QEMU 10.0.x``: the recipe's packages as the root's dpkg says."""


@dataclass(frozen=True)
class Recipe:
    name: str
    """The tree's name before its key: ``hostroot-trixie``."""
    script: Path
    """Run as ``script ROOT MIRROR SECURITY DEB_CACHE [ARGS from prepare...]``."""
    debcache: str
    """The debootstrap package cache under the image cache (``debcache-<suite>``)."""
    packages: tuple[tuple[str, str], ...]
    """(dpkg package, label) whose versions ``Root.versions`` names."""
    decides: str = ""
    """Anything else that decides the content (hashed into the key)."""

    def key(self) -> str:
        digest = hashlib.sha256()
        for part in (BASE, self.script):
            digest.update(part.name.encode() + b"\0" + part.read_bytes() + b"\0")
        digest.update(self.decides.encode())
        return digest.hexdigest()

    def directory(self, images_dir: Path) -> Path:
        return images_dir / f"{self.name}-{self.key()[:12]}"

    def cached(self, images_dir: Path) -> Root | None:
        path = self.directory(images_dir)
        meta = path.with_name(path.name + ".json")
        if path.is_dir() and meta.is_file():
            versions = json.loads(meta.read_text())["versions"]
            return Root(path, self.key(), built=False, seconds=0.0, versions=versions)
        return None

    def build(self, images_dir: Path, *, prepare: Prepare | None = None) -> Root:
        """The cached root for the current recipe, built first if needed (log:
        ``<images>/<name>.log``)."""
        images_dir = images_dir.resolve()
        images_dir.mkdir(parents=True, exist_ok=True)
        with open(images_dir / f".{self.name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            hit = self.cached(images_dir)
            if hit is not None:
                return hit
            return self._build_locked(images_dir, prepare)

    def _build_locked(self, images_dir: Path, prepare: Prepare | None) -> Root:
        key = self.key()
        started = time.monotonic()
        final = self.directory(images_dir)
        work = final.with_name(final.name + ".build")
        scratch = final.with_name(final.name + ".scratch")
        for stale in (work, scratch, final):
            shutil.rmtree(stale, ignore_errors=True)
        scratch.mkdir()
        mirror, security = apt_mirrors()
        with open(images_dir / f"{self.name}.log", "ab") as out:
            extra = prepare(scratch, out) if prepare is not None else []
            argv = [
                *("unshare", "--mount", "--pid", "--fork", "--propagation", "private"),
                *("bash", str(self.script), str(work), mirror, security),
                *(str(images_dir / self.debcache), *extra),
            ]
            out.write(f"+ {' '.join(argv)}\n".encode())
            out.flush()
            subprocess.run(argv, check=True, stdout=out, stderr=subprocess.STDOUT)
        shutil.rmtree(scratch, ignore_errors=True)
        versions = self.versions(work)
        work.rename(final)
        seconds = time.monotonic() - started
        meta = {"key": key, "versions": versions, "buildSeconds": round(seconds, 1)}
        final.with_name(final.name + ".json").write_text(json.dumps(meta, indent=2) + "\n")
        return Root(final, key, built=True, seconds=seconds, versions=versions)

    def versions(self, root: Path) -> str:
        """The recipe's packages' versions in ``root`` (``dpkg-query --admindir``)."""
        found = []
        for package, label in self.packages:
            version = subprocess.run(
                [
                    *("dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W"),
                    *("-f", "${Version}", package),
                ],
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()
            found.append(f"{label} {version}")
        return ", ".join(found)
