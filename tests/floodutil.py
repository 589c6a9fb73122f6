"""Hostile HTTP clients and what to count of the process they aim at (loopback only)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).parent
METRICS_REQUEST = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
HEALTHZ_REQUEST = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def never_reading(address: tuple[str, int], raw: bytes, *, timeout: float = 2.0) -> socket.socket:
    """A client that sends ``raw`` whole and never reads: a 1-byte receive buffer (set
    before the connect, so that the window it offers is the smallest the kernel allows)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1)
        sock.settimeout(timeout)
        sock.connect(address)
        sock.sendall(raw)
    except OSError:
        sock.close()
        raise
    return sock


def descriptors(pid: int) -> int:
    """Open file descriptors of process ``pid`` now."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def tcp_descriptors(pid: int, port: int) -> int:
    """Descriptors of process ``pid`` that are TCP sockets on local port ``port`` (its
    listening socket and the connections accepted from it)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = set()  # a table read while it changes may list a socket twice
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[9] in inodes:
                found.add(fields[9])
    return len(found)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Served:
    """tests/httpserve.py running: the endpoint alone in a process of its own."""

    proc: subprocess.Popen[str]
    port: int
    log: Path

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def expect(self, line: str) -> None:
        assert self.proc.stdout is not None
        got = self.proc.stdout.readline().strip()
        assert got == line, f"{got!r} instead of {line!r}: {self.log.read_text()}"

    def command(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()


@contextmanager
def served(tmp: Path, *, metrics_bytes: int, nofile: int, fill: bool = False) -> Iterator[Served]:
    """The endpoint in a process whose open-file limit is ``nofile``; ``fill``: every
    descriptor left is taken once it listens (see tests/httpserve.py)."""
    log = tmp / "httpserve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, str(HERE / "httpserve.py"), str(metrics_bytes), str(nofile)]
            + (["fill"] if fill else []),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env={**os.environ, "PYTHONPATH": str(HERE.parent)},
        )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().split()
        assert first[:1] == ["port"], log.read_text()
        yield Served(proc, int(first[1]), log)
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
