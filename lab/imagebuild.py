"""The lab's guest image recipe: Debian 12 + cloud-init + qemu-guest-agent + squid.

One qcow2 that boots under both firmwares, built from Debian packages without loop devices:

- ``image_rootfs.sh`` debootstraps the root tree inside a private mount+PID namespace;
- partition 1 (MBR type ``ef``, active) is a FAT32 file system made with ``mkfs.fat`` and
  filled with mtools: systemd-boot as ``EFI/BOOT/BOOTX64.EFI`` for OVMF, and syslinux
  (``syslinux --offset`` into the raw file, ``mbr.bin`` in the first 440 bytes) for SeaBIOS;
  both load the same ``/vmlinuz`` and ``/initrd.img``;
- partition 2 is ext4 made with ``mkfs.ext4 -d`` from the tree, last so cloud-init can grow it;
- ``sfdisk`` writes the table into the raw file, ``qemu-img convert -c`` makes the qcow2.

The cache key is the sha256 of this file and ``image_rootfs.sh``: change the recipe and the
next ``lab image`` builds again; otherwise it reuses the cached file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

HERE = Path(__file__).resolve().parent
ROOTFS_SCRIPT = HERE / "image_rootfs.sh"
SECTOR = 512
ESP_START = 2048  # sectors: 1 MiB
ESP_SECTORS = 256 * 2048  # 256 MiB
ROOT_START = ESP_START + ESP_SECTORS
ROOT_SLACK = 768 * 1024 * 1024  # free space left in the root file system
# The serial console only (console=tty0 also drew every boot message on an emulated frame
# buffer where there is one); mitigations=off: Spectre/Meltdown work-arounds are pure cost
# under TCG, and a lab guest runs nothing but its proxy.
KERNEL_ARGS = "ro console=ttyS0,115200n8 mitigations=off"
SYSTEMD_BOOT = Path("/usr/lib/systemd/boot/efi/systemd-bootx64.efi")
SYSLINUX_MBR = Path("/usr/lib/syslinux/mbr/mbr.bin")


@dataclass(frozen=True)
class Image:
    """A built image in the cache: its file, checksum and recipe key."""

    path: Path
    sha256: str
    key: str
    built: bool
    seconds: float


def recipe_key() -> str:
    """Hash of everything that decides the image's content."""
    digest = hashlib.sha256()
    for part in (Path(__file__), ROOTFS_SCRIPT):
        digest.update(part.name.encode() + b"\0" + part.read_bytes() + b"\0")
    return digest.hexdigest()


def image_name(key: str) -> str:
    return f"proxyfleet-bookworm-{key[:12]}.qcow2"


def apt_mirrors() -> tuple[str, str]:
    """The Debian and Debian-security URIs that apt on this machine is configured with."""
    texts = []
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        if path.is_file() and path.suffix in {".list", ".sources", ""}:
            texts.append(path.read_text(errors="replace"))
    pairs: list[tuple[str, str]] = []
    for text in texts:
        for stanza in re.split(r"\n\s*\n", text):
            uris = re.findall(r"^URIs:\s*(.+)$", stanza, flags=re.M)
            suites = re.findall(r"^Suites:\s*(.+)$", stanza, flags=re.M)
            if uris and suites:
                pairs += [(u, s) for u in uris[0].split() for s in suites[0].split()]
        for line in text.splitlines():
            fields = re.sub(r"\[[^]]*\]", "", line).split()
            if len(fields) >= 3 and fields[0] == "deb":
                pairs.append((fields[1], fields[2]))
    main = next((u for u, s in pairs if s == "bookworm"), "http://deb.debian.org/debian")
    security = next(
        (u for u, s in pairs if s == "bookworm-security"), "http://deb.debian.org/debian-security"
    )
    return main.rstrip("/"), security.rstrip("/")


def cached(images_dir: Path) -> Image | None:
    key = recipe_key()
    path = images_dir / image_name(key)
    sums = path.with_name(path.name + ".sha256")
    if path.is_file() and sums.is_file():
        return Image(path, sums.read_text().split()[0], key, built=False, seconds=0.0)
    return None


def build(images_dir: Path, *, force: bool = False, log: Path | None = None) -> Image:
    """Return the cached image for the current recipe, building it first if needed."""
    images_dir = images_dir.resolve()
    images_dir.mkdir(parents=True, exist_ok=True)
    # The cache is shared by every lab instance: one build at a time, and a second caller
    # waits for the first and then finds its result instead of wiping its build directory.
    with open(images_dir / ".build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        hit = None if force else cached(images_dir)
        if hit is not None:
            return hit
        return _build_locked(images_dir, log)


def _build_locked(images_dir: Path, log: Path | None) -> Image:
    key = recipe_key()
    started = time.monotonic()
    work = images_dir / f"build-{key[:12]}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    logfile = open(log or work / "build.log", "ab")  # noqa: SIM115 - closed below
    try:
        out = _build_in(work, key, images_dir, logfile)
    finally:
        logfile.close()
    shutil.rmtree(work, ignore_errors=True)
    digest = _sha256(out)
    out.with_name(out.name + ".sha256").write_text(f"{digest}  {out.name}\n")
    seconds = time.monotonic() - started
    meta = {"key": key, "sha256": digest, "buildSeconds": round(seconds, 1), "builtAt": time.time()}
    out.with_name(out.name + ".json").write_text(json.dumps(meta, indent=2) + "\n")
    return Image(out, digest, key, built=True, seconds=seconds)


def _build_in(work: Path, key: str, images_dir: Path, logfile: BinaryIO) -> Path:
    def run(*cmd: str | Path, env: dict[str, str] | None = None) -> None:
        _note(logfile, "+ " + " ".join(map(str, cmd)))
        subprocess.run(
            [str(c) for c in cmd],
            check=True,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )

    root_uuid = str(uuid.UUID(bytes=bytes.fromhex(key[:32]), version=4))
    mirror, security = apt_mirrors()
    rootfs = work / "rootfs"
    debcache = images_dir / "debcache"
    run(
        "unshare",
        "--mount",
        "--pid",
        "--fork",
        "--propagation",
        "private",
        "bash",
        ROOTFS_SCRIPT,
        rootfs,
        mirror,
        security,
        debcache,
        root_uuid,
    )

    kernel = sorted((rootfs / "boot").glob("vmlinuz-*"))[-1]
    initrd = sorted((rootfs / "boot").glob("initrd.img-*"))[-1]
    cmdline = f"root=UUID={root_uuid} {KERNEL_ARGS}"

    esp = work / "esp.img"
    run(
        "mkfs.fat",
        "-F",
        "32",
        "-n",
        "PFBOOT",
        "-h",
        str(ESP_START),
        "-C",
        esp,
        str(ESP_SECTORS * SECTOR // 1024),
    )
    (work / "loader.conf").write_text("default debian.conf\ntimeout 0\nconsole-mode keep\n")
    (work / "debian.conf").write_text(
        f"title Debian 12 (proxyfleet lab)\nlinux /vmlinuz\ninitrd /initrd.img\noptions {cmdline}\n"
    )
    (work / "syslinux.cfg").write_text(
        "SERIAL 0 115200\nDEFAULT debian\nPROMPT 0\nTIMEOUT 0\nLABEL debian\n"
        f"  LINUX /vmlinuz\n  INITRD /initrd.img\n  APPEND {cmdline}\n"
    )
    mtools = {"MTOOLS_SKIP_CHECK": "1"}
    run("mmd", "-i", esp, "::/EFI", "::/EFI/BOOT", "::/loader", "::/loader/entries", env=mtools)
    for src, dst in [
        (SYSTEMD_BOOT, "::/EFI/BOOT/BOOTX64.EFI"),
        (work / "loader.conf", "::/loader/loader.conf"),
        (work / "debian.conf", "::/loader/entries/debian.conf"),
        (work / "syslinux.cfg", "::/syslinux.cfg"),
        (kernel, "::/vmlinuz"),
        (initrd, "::/initrd.img"),
    ]:
        run("mcopy", "-i", esp, src, dst, env=mtools)

    used = int(
        subprocess.run(
            ["du", "-sb", str(rootfs)], check=True, capture_output=True, text=True
        ).stdout.split()[0]
    )
    mib = 1024 * 1024
    root_bytes = -(-(used + ROOT_SLACK) // (64 * mib)) * 64 * mib
    root_img = work / "root.img"
    with open(root_img, "wb") as fh:
        fh.truncate(root_bytes)
    run("mkfs.ext4", "-q", "-F", "-L", "pfroot", "-U", root_uuid, "-d", rootfs, root_img)

    raw = work / "disk.raw"
    with open(raw, "wb") as fh:
        fh.truncate(ROOT_START * SECTOR + root_bytes)
    table = (
        "label: dos\nunit: sectors\n"
        f"start={ESP_START}, size={ESP_SECTORS}, type=ef, bootable\n"
        f"start={ROOT_START}, type=83\n"
    )
    _note(logfile, f"+ sfdisk {raw}")
    subprocess.run(
        ["sfdisk", "--no-reread", "--no-tell-kernel", str(raw)],
        input=table.encode(),
        check=True,
        stdout=logfile,
        stderr=subprocess.STDOUT,
    )
    run(
        "dd",
        f"if={esp}",
        f"of={raw}",
        "bs=1M",
        f"seek={ESP_START * SECTOR // mib}",
        "conv=notrunc,sparse",
        "status=none",
    )
    run(
        "dd",
        f"if={root_img}",
        f"of={raw}",
        "bs=1M",
        f"seek={ROOT_START * SECTOR // mib}",
        "conv=notrunc,sparse",
        "status=none",
    )
    run("dd", f"if={SYSLINUX_MBR}", f"of={raw}", "bs=440", "count=1", "conv=notrunc", "status=none")
    run("syslinux", "--offset", str(ESP_START * SECTOR), "--install", raw)

    out = images_dir / image_name(key)
    tmp = out.with_name(out.name + ".part")
    run("qemu-img", "convert", "-c", "-f", "raw", "-O", "qcow2", raw, tmp)
    tmp.rename(out)
    return out


def _note(logfile: BinaryIO, text: str) -> None:
    logfile.write(text.encode() + b"\n")
    logfile.flush()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()
