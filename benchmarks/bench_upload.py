"""Row 3: uploading a 1 GiB base image to a lab host, proxyfleet against scp.

The file is generated once (random bytes, so nothing on the way can compress
it) with its sha256. proxyfleet's side is ``LibvirtHost.ensure_image`` as the
executor calls it: look up the pool and the marker, create the volume, stream
the file with ``virStorageVolUpload`` through the SSH-forwarded libvirt socket
while hashing it, check the size, write the marker. The base and its marker
are deleted before every run so that each run uploads.

proxyfleet runs once per ``ssh.libvirtTransport`` (``--transports``, default
both): ``paramiko`` pumps libvirt's bytes through the SSH link in Python,
``openssh`` through an ``ssh -N -L`` child; each is a contender of its own.

The other side is OpenSSH's ``scp`` of the same file through the same sshd
into the same pool directory, over a master connection opened beforehand
(``ControlMaster``), as proxyfleet's connection is open before its run too.

``--chunk-kib 256,128`` makes each upload chunk size (``uploadstream.CHUNK``, the size of
every stream message libvirtd receives and writes) a contender of its own, for
comparing them in one alternating run; the default is the shipped size alone.

With ``--hosts N`` (row 3b: 3) the same image goes to N lab hosts at once: proxyfleet
one ``ensure_image`` per host on a thread each (as the executor uploads a base to
several hosts), against N ``scp`` running at once; MB/s are summed over the hosts.

Run: ``PROXYFLEET_LAB_INSTANCE=2 .venv/bin/python -m benchmarks.bench_upload [--hosts 3]``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Result,
    alternate,
    bench_dir,
    busy_text,
    emit,
    lab_hosts,
    lab_ssh,
    lab_up,
)
from reconciler.adapters.hypervisor.images import uploadstream
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.model import Image, ImageFormat
from reconciler.model.settings import LIBVIRT_TRANSPORTS, SshSettings
from reconciler.model.vm import base_volume_name

POOL_DIR = "/var/lib/libvirt/images"
KEY = "bench1g"


def blob(path: Path, size: int) -> str:
    """The random file of ``size`` bytes at ``path`` (made once) and its sha256."""
    sums = path.with_name(path.name + ".sha256")
    if path.exists() and path.stat().st_size == size and sums.exists():
        return sums.read_text().split()[0]
    digest = hashlib.sha256()
    chunk = 4 * 1024 * 1024
    with path.open("wb") as fh:
        for _ in range(size // chunk):
            data = os.urandom(chunk)
            digest.update(data)
            fh.write(data)
    sums.write_text(f"{digest.hexdigest()}  {path.name}\n")
    return digest.hexdigest()


class Scp:
    """OpenSSH through a master connection opened once (so no run pays a handshake)."""

    def __init__(self, lab: dict[str, Any], address: str, control: Path) -> None:
        self.target = f"root@{address}"
        self.options = [
            "-i",
            lab["sshKey"],
            "-o",
            f"UserKnownHostsFile={lab['knownHosts']}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            f"ControlPath={control}",
        ]
        master = ["-o", "ControlMaster=yes", "-o", "ControlPersist=600", "-f", "-N"]
        subprocess.run(
            ["ssh", *self.options, *master, self.target],
            check=True,
            timeout=30,
        )

    def copy(self, local: Path, remote: str) -> None:
        subprocess.run(
            ["scp", "-q", *self.options, str(local), f"{self.target}:{remote}"],
            check=True,
            timeout=1200,
        )

    def run(self, *command: str) -> None:
        subprocess.run(["ssh", *self.options, self.target, *command], check=True, timeout=60)

    def close(self) -> None:
        subprocess.run(
            ["ssh", *self.options, "-O", "exit", self.target],
            check=False,
            capture_output=True,
            timeout=30,
        )


def run_nth(calls: list[Callable[[], object]], index: int) -> None:
    calls[index]()


def with_chunk(chunk: int, fn: Callable[[], object]) -> None:
    """``fn`` with the upload stream's chunk size set to ``chunk`` bytes."""
    uploadstream.CHUNK = chunk
    fn()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="file size in MiB")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--hosts", type=int, default=1, help="upload to this many lab hosts at once (row 3b: 3)"
    )
    parser.add_argument(
        "--transports",
        default=",".join(LIBVIRT_TRANSPORTS),
        help="ssh.libvirtTransport values of proxyfleet's side, each a contender of its own "
        f"(default: all; proxyfleet's default is {SshSettings().libvirt_transport})",
    )
    parser.add_argument(
        "--chunk-kib",
        default=str(uploadstream.CHUNK // 1024),
        help="upload chunk sizes in KiB, each a contender of its own "
        f"(default: the shipped {uploadstream.CHUNK // 1024})",
    )
    parser.add_argument("--json", help="write the result here (for benchmarks.run)")
    args = parser.parse_args()
    chunks = [int(kib) * 1024 for kib in args.chunk_kib.split(",")]
    transports = args.transports.split(",")
    unknown = set(transports) - set(LIBVIRT_TRANSPORTS)
    if unknown:
        parser.error(f"--transports: unknown {', '.join(sorted(unknown))}")

    row = "upload" if args.hosts == 1 else f"upload{args.hosts}"
    result = Result(row=row, load_before=os.getloadavg(), busy=busy_text())
    lab = lab_up(args.hosts)
    work = bench_dir("upload")
    size = args.mib * 2**20
    started = time.monotonic()
    path = work / f"blob-{args.mib}m.raw"
    sha = blob(path, size)
    print(f"{path}: {size} bytes, sha256 {sha} [{time.monotonic() - started:.1f} s]")
    hosts = lab_hosts(lab)[: args.hosts]
    image = Image(key=KEY, url=path.as_uri(), sha256=sha, format=ImageFormat.RAW)
    hvs = {
        transport: [
            LibvirtHost(host, replace(lab_ssh(lab), libvirt_transport=transport)) for host in hosts
        ]
        for transport in transports
    }
    scps = [Scp(lab, h.address, work / f"control-{h.name}.sock") for h in hosts]
    remote_scp = f"{POOL_DIR}/scp-{KEY}.raw"
    pool = ThreadPoolExecutor(len(hosts))

    def at_once(fn: Callable[[int], object]) -> None:
        """``fn`` for every host at once, as the executor uploads a base to its hosts."""
        list(pool.map(fn, range(len(hosts))))

    def clean() -> None:
        """No copy stays: every run writes the whole file to every host."""
        for index, hv in enumerate(hvs[transports[0]]):
            images = hv._images  # the adapter's own volume helpers
            handle = images.pool()
            for name in (f"{base_volume_name(image)}.sha256", base_volume_name(image)):
                images.delete_volume(handle, name)
            scps[index].run("rm", "-f", remote_scp)

    try:
        clean()
        contenders: dict[str, Callable[[], float | None]] = {
            "scp": partial(at_once, lambda i: scps[i].copy(path, remote_scp))
        }
        for transport, ones in hvs.items():
            uploads: list[Callable[[], object]] = [
                partial(one.ensure_image, image, path) for one in ones
            ]
            for chunk in chunks:
                contenders[contender(transport, chunk, chunks)] = partial(
                    with_chunk, chunk, partial(at_once, partial(run_nth, uploads))
                )
        timed = alternate(contenders, runs=args.runs, between=clean)
        via = {transport: ones[0].session.via for transport, ones in hvs.items()}
    finally:
        clean()
        pool.shutdown()
        for scp in scps:
            scp.close()
        for ones in hvs.values():
            for one in ones:
                one.close()
    total = size * len(hosts)
    floor = result.add("floor", "MB/s", [total / 1e6 / s for s in timed["scp"]])
    result.add("floor_seconds", "s", timed["scp"])
    result.add("hosts", "hosts", [len(hosts)])
    what = "1 host" if len(hosts) == 1 else f"{len(hosts)} hosts at once, MB/s summed"
    for transport in transports:
        for chunk in chunks:
            key = f"proxyfleet_{transport}" + (f"_{chunk // 1024}k" if len(chunks) > 1 else "")
            seconds = timed[contender(transport, chunk, chunks)]
            pf = result.add(key, "MB/s", [total / 1e6 / s for s in seconds])
            result.add(f"{key}_seconds", "s", seconds)
            result.note(
                f"proxyfleet, ssh.libvirtTransport {transport} (libvirt over {via[transport]}"
                f", {chunk // 1024} KiB chunks): "
                f"{pf.text(0)}, scp {floor.text(0)}: ratio {pf.median / floor.median:.2f}x "
                f"({args.mib} MiB to {what}, sha256 verified while streaming)"
            )
    emit(result, args.json)
    return 0


def contender(transport: str, chunk: int, chunks: list[int]) -> str:
    label = f"proxyfleet ensure_image ({transport})"
    return label if len(chunks) == 1 else f"{label} {chunk // 1024} KiB"


if __name__ == "__main__":
    sys.exit(main())
