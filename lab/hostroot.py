"""The Debian 13 (trixie) root that lab hosts of kind ``debian13`` run libvirt from.

Built once per recipe, like the guest image: ``hostroot_rootfs.sh`` debootstraps trixie
(minbase) from the mirror apt is configured with and installs what docs/hosts.md tells an
operator to install (libvirt 11, QEMU 10, OVMF, sshd), plus virsh, dnsmasq and python3 for
the lab's own daemons. The tree is cached under the image cache (shared by every lab
instance) as ``hostroot-trixie-<key>/``, keyed by the sha256 of this file and the script;
a ``.json`` beside it is written last and marks it complete. Hosts never write into it: each
host mounts it as the lower layer of an overlay of its own (``holder.sh``).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from lab.imagebuild import apt_mirrors

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "hostroot_rootfs.sh"
SUITE = "trixie"


@dataclass(frozen=True)
class HostRoot:
    path: Path
    key: str
    built: bool
    seconds: float
    versions: str
    """``libvirt 11.3.0, QEMU 10.0.x`` as the root's dpkg database says."""


def recipe_key() -> str:
    digest = hashlib.sha256()
    for part in (Path(__file__), SCRIPT):
        digest.update(part.name.encode() + b"\0" + part.read_bytes() + b"\0")
    return digest.hexdigest()


def root_dir(images_dir: Path, key: str | None = None) -> Path:
    return images_dir / f"hostroot-{SUITE}-{(key or recipe_key())[:12]}"


def cached(images_dir: Path) -> HostRoot | None:
    path = root_dir(images_dir)
    meta = path.with_name(path.name + ".json")
    if path.is_dir() and meta.is_file():
        data = json.loads(meta.read_text())
        return HostRoot(path, recipe_key(), built=False, seconds=0.0, versions=data["versions"])
    return None


def build(images_dir: Path, *, log: Path | None = None) -> HostRoot:
    """The cached root for the current recipe, debootstrapped first if needed."""
    images_dir = images_dir.resolve()
    images_dir.mkdir(parents=True, exist_ok=True)
    with open(images_dir / ".hostroot.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        hit = cached(images_dir)
        if hit is not None:
            return hit
        return _build_locked(images_dir, log or images_dir / f"hostroot-{SUITE}.log")


def _build_locked(images_dir: Path, log: Path) -> HostRoot:
    key = recipe_key()
    started = time.monotonic()
    final = root_dir(images_dir, key)
    work = final.with_name(final.name + ".build")
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(final, ignore_errors=True)
    mirror, security = apt_mirrors()
    with open(log, "ab") as out:
        out.write(f"+ {SCRIPT} {work} {mirror} {security}\n".encode())
        out.flush()
        subprocess.run(
            [
                *("unshare", "--mount", "--pid", "--fork", "--propagation", "private"),
                *("bash", str(SCRIPT), str(work), mirror, security),
                str(images_dir / f"debcache-{SUITE}"),
            ],
            check=True,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    versions = root_versions(work)
    work.rename(final)
    seconds = time.monotonic() - started
    meta = {"key": key, "versions": versions, "buildSeconds": round(seconds, 1)}
    final.with_name(final.name + ".json").write_text(json.dumps(meta, indent=2) + "\n")
    return HostRoot(final, key, built=True, seconds=seconds, versions=versions)


def root_versions(root: Path) -> str:
    """libvirt's and QEMU's package versions in the root (``dpkg-query --admindir``)."""
    found = {}
    for package in ("libvirt-daemon", "qemu-system-x86"):
        found[package] = subprocess.run(
            [
                *("dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W"),
                *("-f", "${Version}", package),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    return f"libvirt {found['libvirt-daemon']}, QEMU {found['qemu-system-x86']}"
