"""A real etcd cluster on 127.0.0.1 for the fleet lock's tests (Debian's etcd-server).

``EtcdCluster(base, size=3)`` starts ``size`` members on free loopback ports,
each with its own data dir, and waits until the cluster has a leader; members
can be killed (SIGKILL) and started again with their data. ``gateway()``
starts an ``etcd gateway`` (etcd's own TCP proxy over every member), the
endpoint a daemon is given, as docs/operations.md recommends.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def etcd_binary() -> str:
    path = shutil.which("etcd") or ("/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None)
    assert path, "etcd is missing; `make deps` installs it (Makefile APT_PACKAGES: etcd-server)"
    return path


@dataclass
class Member:
    name: str
    client_port: int
    peer_port: int
    data_dir: Path
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def client_url(self) -> str:
        return f"http://127.0.0.1:{self.client_port}"

    @property
    def peer_url(self) -> str:
        return f"http://127.0.0.1:{self.peer_port}"


@dataclass
class EtcdCluster:
    base: Path
    size: int = 3
    members: list[Member] = field(default_factory=list)
    gateways: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __post_init__(self) -> None:
        for i in range(self.size):
            name = f"m{i}"
            self.members.append(
                Member(name, free_port(), free_port(), self.base / name, self.base / f"{name}.log")
            )

    @property
    def initial_cluster(self) -> str:
        return ",".join(f"{m.name}={m.peer_url}" for m in self.members)

    @property
    def endpoints(self) -> str:
        return ",".join(f"127.0.0.1:{m.client_port}" for m in self.members)

    def start(self) -> None:
        for member in self.members:
            self.start_member(member)
        assert self.wait_healthy(30), self.logs()

    def start_member(self, member: Member) -> None:
        argv = [
            etcd_binary(),
            "--name", member.name,
            "--data-dir", str(member.data_dir),
            "--listen-client-urls", member.client_url,
            "--advertise-client-urls", member.client_url,
            "--listen-peer-urls", member.peer_url,
            "--initial-advertise-peer-urls", member.peer_url,
            "--initial-cluster", self.initial_cluster,
            "--initial-cluster-state", "new",
            "--initial-cluster-token", f"pf-{self.base.name}",
            "--heartbeat-interval", "100",
            "--election-timeout", "1000",
            "--logger", "zap",
        ]  # fmt: skip
        log = member.log.open("ab")
        member.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)

    def kill(self, member: Member) -> None:
        if member.proc is not None and member.proc.poll() is None:
            member.proc.send_signal(signal.SIGKILL)
            member.proc.wait(10)
        member.proc = None

    def running(self) -> list[Member]:
        return [m for m in self.members if m.proc is not None and m.proc.poll() is None]

    def status(self, member: Member) -> dict[str, object]:
        """``member``'s maintenance status ({} when it does not answer)."""
        try:
            request = urllib.request.Request(
                f"{member.client_url}/v3/maintenance/status", data=b"{}", method="POST"
            )
            with urllib.request.urlopen(request, timeout=2) as response:
                status = json.loads(response.read())
        except (OSError, urllib.error.URLError, ValueError):
            return {}
        return status if isinstance(status, dict) else {}

    def has_leader(self, member: Member) -> bool:
        """True when ``member`` answers and sees a leader (a quorum)."""
        return str(self.status(member).get("leader", "0")) != "0"

    def raft_leader(self) -> Member:
        """The member that is etcd's (raft) leader now."""
        for member in self.running():
            status = self.status(member)
            header = status.get("header")
            if isinstance(header, dict) and header.get("member_id") == status.get("leader"):
                return member
        raise AssertionError(f"no etcd member says it leads:\n{self.logs()}")

    def wait_healthy(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = self.running()
            # A quorum answers a linearizable write.
            if running and all(self.has_leader(m) for m in running) and self.put_ok(running[0]):
                return True
            time.sleep(0.2)
        return False

    def put_ok(self, member: Member) -> bool:
        body = json.dumps({"key": "cHJvYmU=", "value": "MQ=="}).encode()  # probe=1
        try:
            request = urllib.request.Request(
                f"{member.client_url}/v3/kv/put", data=body, method="POST"
            )
            with urllib.request.urlopen(request, timeout=3) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def gateway(self) -> str:
        """Start an ``etcd gateway`` over every member; returns its ``etcd3+http://`` URL."""
        port = free_port()
        log = (self.base / f"gateway-{port}.log").open("ab")
        proc = subprocess.Popen(
            [
                etcd_binary(),
                "gateway",
                "start",
                f"--endpoints={self.endpoints}",
                f"--listen-addr=127.0.0.1:{port}",
                "--retry-delay=1s",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.gateways.append(proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return f"etcd3+http://127.0.0.1:{port}"
            time.sleep(0.1)
        raise AssertionError(f"etcd gateway on {port} did not listen")

    def stop(self) -> None:
        for proc in self.gateways:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        for member in self.members:
            self.kill(member)

    def logs(self) -> str:
        return "\n".join(
            f"== {m.name}\n" + m.log.read_text(errors="replace")[-2000:]
            for m in self.members
            if m.log.exists()
        )
