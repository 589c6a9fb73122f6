"""The lab image's ``agentoff`` variant: qemu-guest-agent installed but started by nothing.

Debian 12's ``qemu-guest-agent.service`` is static: udev starts it, through
``/lib/udev/rules.d/60-qemu-guest-agent.rules`` (``TAG+="systemd"`` and
``ENV{SYSTEMD_WANTS}="qemu-guest-agent.service"`` on the agent's virtio port). The variant
overrides that rule in ``/etc/udev/rules.d`` with one that keeps the tag and drops the want:
the device unit the service ``BindsTo`` still appears, nothing wants the service, so
``systemctl start qemu-guest-agent`` works and nothing else starts it, which is Debian's
equivalent of a disabled unit. (An empty override would also drop the tag: systemd would
never see the device, and ``systemctl start`` would wait 90 s for it and fail.)

Derived from the cached main image without loop devices or a rebuild, in about ten seconds:

- ``qemu-img convert`` the main image to raw and hash its 64 KiB blocks (holes skipped);
- ``debugfs -w`` writes the rule into partition 2's ext4 (``file?offset=``), ``e2fsck -fn``
  checks the file system after it;
- the 64 KiB blocks that changed are written into a copy of the main qcow2 with
  ``qemu-io write -s`` (recompressing the whole disk took 36 s here), and ``qemu-img
  compare`` proves the result holds exactly the patched raw disk.

Cached beside the main image, keyed by the main image's recipe key and this file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import BinaryIO

from lab import imagebuild
from lab.imagebuild import Image

NAME = "agentoff"
RULE_PATH = "/etc/udev/rules.d/60-qemu-guest-agent.rules"
RULE = (
    "# proxyfleet lab image variant 'agentoff': the agent's port is still a systemd device\n"
    "# (qemu-guest-agent.service BindsTo it) but nothing wants the service: installed, not\n"
    "# started. Overrides /lib/udev/rules.d/60-qemu-guest-agent.rules.\n"
    'SUBSYSTEM=="virtio-ports", ATTR{name}=="org.qemu.guest_agent.0", TAG+="systemd"\n'
)
BLOCK = 64 * 1024
ROOT_OFFSET = imagebuild.ROOT_START * imagebuild.SECTOR


def recipe_key(base_key: str) -> str:
    digest = hashlib.sha256(base_key.encode() + b"\0")
    digest.update(Path(__file__).read_bytes())
    return digest.hexdigest()


def image_name(key: str) -> str:
    return f"proxyfleet-bookworm-{NAME}-{key[:12]}.qcow2"


def cached(images_dir: Path, base: Image) -> Image | None:
    key = recipe_key(base.key)
    path = images_dir / image_name(key)
    sums = path.with_name(path.name + ".sha256")
    if path.is_file() and sums.is_file():
        return Image(path, sums.read_text().split()[0], key, built=False, seconds=0.0)
    return None


def build(images_dir: Path, base: Image, *, log: Path) -> Image:
    """The cached variant of ``base``, derived first if needed."""
    images_dir = images_dir.resolve()
    with open(images_dir / f".{NAME}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        hit = cached(images_dir, base)
        if hit is not None:
            return hit
        started = time.monotonic()
        key = recipe_key(base.key)
        work = images_dir / f"{NAME}-{key[:12]}.build"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        out = images_dir / image_name(key)
        try:
            with open(log, "ab") as logfile:
                _derive(base.path, work, out, logfile)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        with open(out, "rb") as fh:
            digest = hashlib.file_digest(fh, "sha256").hexdigest()
        out.with_name(out.name + ".sha256").write_text(f"{digest}  {out.name}\n")
        seconds = time.monotonic() - started
        meta = {"key": key, "base": base.path.name, "sha256": digest, "buildSeconds": seconds}
        out.with_name(out.name + ".json").write_text(json.dumps(meta, indent=2) + "\n")
        return Image(out, digest, key, built=True, seconds=seconds)


def _derive(base: Path, work: Path, out: Path, logfile: BinaryIO) -> None:
    def run(*cmd: str | Path) -> None:
        _note(logfile, "+ " + " ".join(map(str, cmd)))
        started = time.monotonic()
        subprocess.run([str(c) for c in cmd], check=True, stdout=logfile, stderr=subprocess.STDOUT)
        _note(logfile, f"  ({time.monotonic() - started:.1f}s)")

    raw = work / "disk.raw"
    run("qemu-img", "convert", "-f", "qcow2", "-O", "raw", base, raw)
    before = _block_hashes(raw)
    rule = work / "rule"
    rule.write_text(RULE)
    rule.chmod(0o644)
    fs = f"{raw}?offset={ROOT_OFFSET}"
    run("debugfs", "-w", "-R", f"write {rule} {RULE_PATH}", fs)
    run("e2fsck", "-fn", fs)
    started = time.monotonic()
    changed = _changed(before, _block_hashes(raw))
    _note(logfile, f"changed (offset, length): {changed} ({time.monotonic() - started:.1f}s)")
    if not changed:
        raise RuntimeError(f"debugfs changed nothing in {raw}")
    tmp = out.with_name(out.name + ".part")
    shutil.copyfile(base, tmp)
    writes: list[str] = []
    with open(raw, "rb") as src:
        for i, (offset, length) in enumerate(changed):
            chunk = work / f"chunk{i}"
            src.seek(offset)
            chunk.write_bytes(src.read(length).ljust(length, b"\0"))
            writes += ["-c", f"write -q -s {chunk} {offset} {length}"]
    run("qemu-io", "-f", "qcow2", *writes, tmp)
    run("qemu-img", "compare", "-f", "qcow2", "-F", "raw", tmp, raw)
    tmp.rename(out)


def _block_hashes(path: Path) -> dict[int, bytes]:
    """blake2b of every ``BLOCK`` of ``path`` that holds data (holes are zeros: left out)."""
    hashes: dict[int, bytes] = {}
    with open(path, "rb") as fh:
        fd, size, pos = fh.fileno(), os.fstat(fh.fileno()).st_size, 0
        while pos < size:
            try:
                start = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:  # ENXIO: only a hole is left
                break
            stop = os.lseek(fd, start, os.SEEK_HOLE)
            fh.seek(start - start % BLOCK)
            for block in range(start // BLOCK, -(-stop // BLOCK)):
                hashes[block] = hashlib.blake2b(fh.read(BLOCK)).digest()
            pos = -(-stop // BLOCK) * BLOCK
    return hashes


def _changed(before: dict[int, bytes], after: dict[int, bytes]) -> list[tuple[int, int]]:
    """(offset, length) runs of the blocks whose content differs."""
    zero = hashlib.blake2b(bytes(BLOCK)).digest()
    runs: list[tuple[int, int]] = []
    for block in sorted(set(before) | set(after)):
        if before.get(block, zero) == after.get(block, zero):
            continue
        offset = block * BLOCK
        if runs and sum(runs[-1]) == offset:
            runs[-1] = (runs[-1][0], runs[-1][1] + BLOCK)
        else:
            runs.append((offset, BLOCK))
    return runs


def _note(logfile: BinaryIO, text: str) -> None:
    logfile.write(text.encode() + b"\n")
    logfile.flush()
