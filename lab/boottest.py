"""Boot the lab image with QEMU directly, once per firmware, and time it.

Both run under TCG by default: on these machines KVM dies with "KVM internal error" inside
the firmware, OVMF and SeaBIOS alike (``--accel kvm`` shows it). Each boot gets a qcow2
overlay and a NoCloud seed ISO; the guest has no NIC, so nothing leaves the machine.
Measured: seconds until the guest agent answers ``guest-ping`` and until cloud-init's final
stage prints its "finished" line on the serial console.
"""

from __future__ import annotations

import io
import json
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

OVMF_CODE = Path("/usr/share/OVMF/OVMF_CODE_4M.fd")
OVMF_VARS = Path("/usr/share/OVMF/OVMF_VARS_4M.fd")
USER_DATA = (
    b"#cloud-config\nruncmd:\n  - [sh, -c, 'echo proxyfleet-lab-boottest-runcmd > /dev/ttyS0']\n"
)


@dataclass(frozen=True)
class BootResult:
    firmware: str
    accel: str
    agent_seconds: float | None
    final_seconds: float | None
    console: Path


def make_seed(path: Path, *, user_data: bytes, instance_id: str, hostname: str) -> None:
    """A NoCloud seed ISO (volume label ``cidata``) with user-data and meta-data."""
    import pycdlib

    meta = f"instance-id: {instance_id}\nlocal-hostname: {hostname}\n".encode()
    iso = pycdlib.PyCdlib()
    iso.new(interchange_level=3, joliet=3, rock_ridge="1.09", vol_ident="cidata")
    for name, data in (("user-data", user_data), ("meta-data", meta)):
        iso_name = "/" + name.upper().replace("-", "_") + ".;1"
        iso.add_fp(io.BytesIO(data), len(data), iso_name, rr_name=name, joliet_path="/" + name)
    iso.write(str(path))
    iso.close()


def agent_ping(sock_path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2)
            sock.connect(str(sock_path))
            sock.sendall(json.dumps({"execute": "guest-ping"}).encode() + b"\n")
            return b'"return"' in sock.recv(4096)
    except OSError:
        return False


def boot(
    image: Path,
    firmware: str,
    *,
    accel: str = "tcg",
    timeout: float = 600,
    workdir: Path | None = None,
) -> BootResult:
    work = Path(tempfile.mkdtemp(prefix=f"pflab-boot-{firmware}-", dir=workdir))
    overlay, seed, console, qga = (
        work / n for n in ("disk.qcow2", "seed.iso", "console.log", "qga.sock")
    )
    subprocess.run(
        [
            "qemu-img",
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            str(image.resolve()),
            "-F",
            "qcow2",
            str(overlay),
            "4G",
        ],
        check=True,
    )
    make_seed(
        seed,
        user_data=USER_DATA,
        instance_id=f"boottest-{firmware}-{time.time_ns()}",
        hostname=f"boottest-{firmware}",
    )
    cmd = [
        "qemu-system-x86_64",
        "-machine",
        f"q35,accel={accel}",
        "-m",
        "1024",
        "-smp",
        "1",
        "-display",
        "none",
        "-monitor",
        "none",
        "-nic",
        "none",
        "-serial",
        f"file:{console}",
        "-drive",
        f"file={overlay},if=virtio,format=qcow2",
        "-drive",
        f"file={seed},media=cdrom,format=raw,readonly=on",
        "-chardev",
        f"socket,id=qga,path={qga},server=on,wait=off",
        "-device",
        "virtio-serial-pci",
        "-device",
        "virtserialport,chardev=qga,name=org.qemu.guest_agent.0",
    ]
    if firmware == "uefi":
        shutil.copy(OVMF_VARS, work / "vars.fd")
        cmd += [
            "-drive",
            f"if=pflash,format=raw,readonly=on,file={OVMF_CODE}",
            "-drive",
            f"if=pflash,format=raw,file={work / 'vars.fd'}",
        ]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=open(work / "qemu.log", "wb"))  # noqa: SIM115
    agent_at = final_at = None
    try:
        while time.monotonic() - started < timeout and proc.poll() is None:
            elapsed = time.monotonic() - started
            if agent_at is None and qga.exists() and agent_ping(qga):
                agent_at = elapsed
            text = console.read_bytes() if console.exists() else b""
            if final_at is None and b"Cloud-init v." in text and b"finished at" in text:
                final_at = elapsed
            if agent_at is not None and final_at is not None:
                break
            if b"KVM internal error" in (work / "qemu.log").read_bytes():
                break
            time.sleep(1)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    overlay.unlink(missing_ok=True)
    return BootResult(firmware, accel, agent_at, final_at, console)
