"""End to end on the lab: two ``proxyfleet run`` processes for one fleet, active/standby.

Both daemons pull the same bare repo and share a 3-member etcd cluster on 127.0.0.1 (each
through its own ``etcd gateway``) as their coordination service, with a 6 s TTL. One leads,
the other stands by. A commit adds a proxy; once the leader's create has made the VM's
first volume on the host, the leader gets SIGKILL. The standby must take over within the
TTL (plus a poll and some slack), finish the job, and leave exactly one owned VM, healthy,
with no volume or NVRAM file that belongs to no domain. Then the manifest is removed and
the new leader deletes the VM.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from etcdcluster import EtcdCluster
from test_e2e_daemon import (
    SECRET,
    DaemonProcess,
    LabHost,
    Remote,
    converge,
    fleet_yaml,
    free_port,
    git,
    proxy_yaml,
    wait_for,
)

FLEET = "e2es"
PROXY = "pfs-a"
PREFIX = f"pf-{FLEET}-{PROXY}-"
TTL = 6


def our_fleet_yaml() -> str:
    return fleet_yaml().replace("name: e2ed", f"name: {FLEET}")


def our_proxy_yaml(zone: str, probe_url: str) -> str:
    return proxy_yaml(zone, probe_url, 1).replace("pfd-a", PROXY)


def leads(daemon: DaemonProcess) -> bool:
    try:
        return daemon.alive() and daemon.get("/healthz")[1].startswith("ok: leader")
    except OSError:
        return False


@dataclass
class Pair:
    remote: Remote
    daemons: list[DaemonProcess]
    host: LabHost
    hosts: list[LabHost]
    probe: str

    def ours(self) -> list[tuple[str, str]]:
        return [(h.name, d) for h in self.hosts for d in h.world().domains if d.startswith(PREFIX)]

    def leaks(self) -> list[str]:
        return [f"{h.name}: {leak}" for h in self.hosts for leak in h.world().leaks()]


@pytest.fixture(scope="module")
def pair(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    tmp = tmp_path_factory.mktemp("standby-e2e")
    etcd = EtcdCluster(tmp / "etcd", size=3)
    (tmp / "etcd").mkdir()
    etcd.start()
    bare, work = tmp / "fleet.git", tmp / "operator"
    git(tmp, "init", "-q", "--bare", "-b", "main", str(bare))
    git(tmp, "clone", "-q", str(bare), str(work))
    git(work, "checkout", "-q", "-b", "main")
    remote = Remote(bare, work)
    remote.push("An empty fleet on the lab hosts", {"fleet.yaml": our_fleet_yaml()})
    (tmp / "hook-secret").write_bytes(SECRET + b"\n")
    env = {k: v for k, v in os.environ.items() if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC")}
    daemons = []
    for box in ("a", "b"):
        port = free_port()
        config = tmp / f"proxyfleet-{box}.yaml"
        config.write_text(
            f"repo:\n  url: file://{bare}\n  branch: main\n"
            "interval: 3600\n"
            f'listen: "127.0.0.1:{port}"\n'
            f"webhook:\n  secretFile: {tmp / 'hook-secret'}\n"
            f"ssh:\n  keyFile: {lab['sshKey']}\n  knownHostsFile: {lab['knownHosts']}\n"
            "log:\n  level: info\n"
            f"coordination:\n  url: {etcd.gateway()}\n  ttlSeconds: {TTL}\n"
            f"stateDir: {tmp / f'state-{box}'}\n"
        )
        workdir = tmp / f"box-{box}"
        workdir.mkdir()
        daemons.append(DaemonProcess(config, port, workdir, env))
    hosts = [
        LabHost(
            h["name"], h["address"], h["zone"], h["guestSubnet"], lab["sshKey"], lab["knownHosts"]
        )
        for h in lab["hosts"]
    ]
    host = next(h for h in hosts if h.zone == "zone-a")
    try:
        yield Pair(remote, daemons, host, hosts, str(lab["probeUrl"]))
    finally:
        for daemon in daemons:
            daemon.stop_now()
            for n in range(1, daemon.starts + 1):
                log = daemon.workdir / f"daemon-{n}.log"
                print(f"--- {daemon.workdir.name} run {n} log tail:\n{log.read_text()[-3000:]}")
        etcd.stop()


def test_a_leader_killed_mid_create_is_replaced_by_the_standby_and_the_fleet_converges(
    pair: Pair,
) -> None:
    first, second = pair.daemons
    first.start()
    wait_for("the first daemon to lead", lambda: leads(first), 120)
    second.start()
    wait_for(
        "the second daemon to stand by",
        lambda: second.get("/healthz")[1].startswith("standby: standby for fleet e2es"),
        120,
    )

    pair.remote.push(
        f"Add {PROXY}", {f"proxies/{PROXY}.yaml": our_proxy_yaml(pair.host.zone, pair.probe)}
    )
    assert first.hook() == 202
    pool = pair.host.pool_on_disk()
    wait_for(
        "the leader's first volume",
        lambda: any(p.name.startswith(PREFIX) for p in pool.iterdir()),
        600,
        step=0.01,
    )
    killed = time.monotonic()
    first.signal(signal.SIGKILL)
    assert first.proc is not None and first.proc.wait(timeout=30) == -signal.SIGKILL
    at_kill = pair.host.world()
    print(f"at SIGKILL: domains {sorted(at_kill.domains)}, volumes {at_kill.volumes}")

    took = wait_for("the standby to lead", lambda: leads(second), TTL + 10, step=0.2)
    print(f"takeover {time.monotonic() - killed:.1f} s after SIGKILL")
    assert took <= TTL + 0.6 + 3

    def converged() -> bool:
        return second.health_of(PROXY).get("healthy") == 1.0

    converge(second, f"{PROXY} healthy under the new leader", converged)
    ours = pair.ours()
    assert len(ours) == 1, ours
    name = ours[0][1]
    assert pair.host.world().domains[name] == ("running", True)
    assert pair.leaks() == [], pair.leaks()

    # The new leader goes on acting: the manifest removed, the VM and its files are gone.
    # Removing the only proxy is a 100 % shrink: the commit acknowledges it
    # (policy.maxShrinkPercent), as test_e2e_daemon does.
    acknowledged = our_fleet_yaml() + "    acknowledgeShrinkTo: 0\n"
    pair.remote.push(f"Remove {PROXY}", {f"proxies/{PROXY}.yaml": None, "fleet.yaml": acknowledged})
    assert second.hook() == 202
    converge(second, "the delete", lambda: pair.ours() == [])
    assert pair.leaks() == [], pair.leaks()
    second.signal(signal.SIGTERM)
    assert second.proc is not None and second.proc.wait(timeout=60) == 0
