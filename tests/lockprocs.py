"""Daemon processes (tests/lockdaemon.py) and a fleet repo for the fleet lock's tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from etcdcluster import free_port
from gitutil import Remote, make_remote

HERE = Path(__file__).parent
ROOT = HERE.parent

FLEET = """\
apiVersion: proxyfleet/v1
kind: Fleet
metadata:
  name: FLEETNAME
spec:
  images:
    debian-12:
      url: https://images.example.test/debian-12.qcow2
      sha256: "abababababababababababababababababababababababababababababababab"
  machineTypes:
    small: {vcpus: 1, memoryMiB: 512, diskGiB: 4}
  hosts:
HOSTS  policy:
    prune: true
    allowEmpty: true
    maxDeletesPerRun: 50
"""

HOST = """\
    - name: kvm01
      address: 127.0.0.1
      port: 1
      zone: a
      network: {bridge: br0}
"""

PROXY = """\
---
apiVersion: proxyfleet/v1
kind: Proxy
metadata:
  name: NAME
spec:
  placement: {zone: a, image: debian-12, machineType: small}
  cloudInit:
    userData: |
      #cloud-config
      hostname: NAME
"""


def fleet_files(
    proxies: int, *, hosts: bool = True, name: str = "home", host: str = "kvm01"
) -> dict[str, str]:
    fleet = FLEET.replace("FLEETNAME", name).replace(
        "HOSTS", HOST.replace("kvm01", host) if hosts else "    []\n"
    )
    if not hosts:
        fleet = fleet.replace("  hosts:\n    []\n", "  hosts: []\n")
    text = "".join(PROXY.replace("NAME", f"web-{i}") for i in range(1, proxies + 1))
    return {"fleet.yaml": fleet, "proxies.yaml": text or "# none\n"}


def fleet_remote(
    tmp: Path, proxies: int, *, hosts: bool = True, name: str = "home", host: str = "kvm01"
) -> Remote:
    remote = make_remote(tmp)
    remote.commit(fleet_files(proxies, hosts=hosts, name=name, host=host), f"{proxies} proxies")
    return remote


@dataclass
class DaemonProc:
    box: str
    port: int
    proc: subprocess.Popen[bytes]
    stderr: Path
    samples: list[tuple[float, str]] = field(default_factory=list)

    def health(self) -> str:
        """The /healthz body ("" when it does not answer)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2) as r:
                return str(r.read().decode())
        except urllib.error.HTTPError as err:
            return str(err.read().decode())
        except OSError:
            return ""

    def leads(self) -> bool:
        return self.health().startswith("ok: leader")

    def stands_by(self) -> bool:
        return self.health().startswith("standby:")

    def roles(self) -> dict[str, str]:
        """A daemon of several fleets: fleet -> "leader", "standby" or "stale", from the
        per-fleet lines of /healthz ({} when it does not answer)."""
        found = {}
        for line in self.health().splitlines()[1:]:
            fleet, _, text = line.partition(": ")
            found[fleet] = (
                "leader"
                if text.startswith("ok: leader")
                else "standby"
                if text.startswith("standby:")
                else "stale"
            )
        return found

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            self.proc.send_signal(sig)

    def kill(self) -> float:
        """SIGKILL; returns the moment the process was gone (time.time()). A mutation it
        logged between the signal's sending and its delivery is still the old leader's, made
        while it held the lock: only later ones would be a second actor."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        return time.time()

    def stop(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def output(self) -> str:
        return self.stderr.read_text(errors="replace") if self.stderr.exists() else ""


def start_daemon(
    tmp: Path,
    box: str,
    *,
    repo_url: str,
    log: Path,
    coordination_url: str = "",
    ttl: float = 6,
    create_seconds: float = 0.0,
    state_dir: Path | None = None,
    fleets: dict[str, str] | None = None,
    member: str = "",
) -> DaemonProc:
    """``fleets`` (fleet id -> repo URL) instead of ``repo_url``: a daemon of several fleets,
    named ``member`` on the ring."""
    port = free_port()
    state = state_dir if state_dir is not None else tmp / f"state-{box}"
    config: dict[str, object] = {
        "box": box,
        "repoUrl": repo_url,
        "stateDir": str(state),
        "coordinationUrl": coordination_url,
        "ttl": ttl,
        "port": port,
        "log": str(log),
        "createSeconds": create_seconds,
    }
    if fleets is not None:
        config["fleets"] = [{"fleet": f, "repoUrl": url} for f, url in fleets.items()]
        config["member"] = member or box
    config_file = tmp / f"{box}.json"
    config_file.write_text(json.dumps(config))
    stderr = tmp / f"{box}.stderr"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "lockdaemon.py"), str(config_file)],
        stdout=subprocess.DEVNULL,
        stderr=stderr.open("ab"),
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return DaemonProc(box, port, proc, stderr)


def mutations(log: Path) -> list[tuple[float, str, str, str]]:
    """(time, box, method, target) of every mutating call that passed a fence, in order."""
    if not log.exists():
        return []
    rows = []
    for line in log.read_text().splitlines():
        when, box, method, target = [*line.split(" ", 3), ""][:4]
        rows.append((float(when), box, method, target))
    return sorted(rows)


def fleet_remotes(tmp: Path, fleets: list[str], proxies: int) -> dict[str, str]:
    """A remote per fleet (``proxies`` proxies each, host ``kvm-<fleet>``): fleet -> URL."""
    urls = {}
    for fleet in fleets:
        (tmp / fleet).mkdir()
        urls[fleet] = fleet_remote(tmp / fleet, proxies, name=fleet, host=f"kvm-{fleet}").url
    return urls


def leaders_by_fleet(daemons: list[DaemonProc]) -> dict[str, list[str]]:
    """fleet -> the boxes whose /healthz says they lead it now (live daemons only)."""
    found: dict[str, list[str]] = {}
    for d in daemons:
        if not d.alive():
            continue
        for fleet, role in d.roles().items():
            found.setdefault(fleet, [])
            if role == "leader":
                found[fleet].append(d.box)
    return found


def fleet_of(target: str) -> str:
    """The fleet of a mutation logged by a daemon of several fleets (host ``kvm-<fleet>``)."""
    return target.split(":", 1)[0].removeprefix("kvm-")
