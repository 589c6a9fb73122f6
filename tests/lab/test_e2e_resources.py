"""End to end on the lab: host resources (issue 18) with real pools, guests and daemons.

Two lab hosts, both in zone-a of the fleet. The first (A) keeps its storage pool on a
2.5 GiB tmpfs mounted over /var/lib/libvirt/images in its own mount namespace; the second
(B) has the machine's disk. ``policy.overcommit.disk: 10`` lets a ``tiny`` VM (4 GiB disk)
count as 0.4 GiB, a ``big`` one (40 GiB) as 4 GiB, a ``huge`` one (10000 GiB) as 1000 GiB.
Scenarios, in file order, sharing one apply and two guests:

1. One apply: ``r-big`` does not fit A's pool and lands on B; ``r-huge`` fits nowhere and is
   blocked with every host's numbers; ``r-full`` (tiny, pinned to A) lands on A.
3. During that apply's health wait libvirtd on B is stopped until the apply has met its
   missing socket (sshd's "Connect failed", told apart as "libvirt's socket ... is
   missing"), then started: the apply goes on over the forwarded socket (no "refuses unix
   socket forwarding", no virt-ssh-helper), r-big serves, ``hosts check`` says ``via
   openssh-streamlocal`` (the default transport's ``ssh -N -L`` child, restarted).
4. ``proxyfleet console r-big`` in a pty: Enter brings the guest's serial getty (``r-big
   login:``), a second console without --force is refused, Ctrl-] detaches with exit 0
   (issue 16).
2. A's pool filled from the host side, a guest write through the guest agent: QEMU pauses
   r-full (``paused (I/O error)``); apply reports the reason and the pool's free space and
   leaves it paused; the filler removed, the next apply resumes it and it serves again.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from labutil import (
    ROOT,
    Applied,
    apply,
    console_login,
    daemon_pid,
    finish_apply,
    git,
    lab_cli,
    lab_daemon,
    layout,
    probe_through,
    squid_user_data,
    start_apply,
    virsh,
)

from lab import config as lab_config
from lab import hosts as lab_hosts
from lab.hosts import LabError

LAB_HOSTS = 2
IMAGE = "debian12-bios"
POOL_DIR = "/var/lib/libvirt/images"
POOL_SIZE = "2560m"
MIB = 2**20
STARTED = time.monotonic()
REFUSED = "refuses unix socket forwarding"
MISSING = "libvirt's socket /var/run/libvirt/libvirt-sock is missing on"


class Fleet:
    def __init__(self, lab: dict[str, Any], repo: Path) -> None:
        self.lab = lab
        self.repo = repo
        self.small, self.roomy = (h["name"] for h in lab["hosts"])
        self.runs = 0
        self.first: Applied | None = None
        self.restarted_at = 0.0

    def put(self, name: str, machine: str, *, pin: str = "") -> None:
        # serial_getty: scenario 4 logs in to r-big's serial console (labutil.SERIAL_GETTY).
        text = squid_user_data(name, serial_getty=True)
        user_data = "".join(f"      {line}\n" for line in text.split("\n"))
        (self.repo / "proxies" / f"{name}.yaml").write_text(
            "apiVersion: proxyfleet/v1\nkind: Proxy\n"
            f"metadata:\n  name: {name}\n"
            f"spec:\n  placement:\n    zone: zone-a\n    image: {IMAGE}\n"
            f"    machineType: {machine}\n"
            + (f"    host: {pin}\n" if pin else "")
            + "  cloudInit:\n    userData: |\n"
            + user_data.rstrip(" \n")
            + "\n"
            f"  health:\n    probeURL: {self.lab['probeUrl']}\n    expectStatus: 204\n"
            "    timeoutSeconds: 10\n"
        )

    def commit(self, message: str) -> None:
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", message)

    def log_file(self) -> Path:
        self.runs += 1
        return self.repo.parent / f"apply-{self.runs}.log"

    def apply(self) -> Applied:
        return apply(self.lab, self.repo, self.log_file())

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *(sys.executable, "-m", "reconciler", *args, "--repo", str(self.repo)),
                *("--ssh-key", self.lab["sshKey"], "--known-hosts", self.lab["knownHosts"]),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


def in_small(fl: Fleet, *cmd: str) -> str:
    return lab_hosts.in_host(layout(fl.small), *cmd)


def pool_free(fl: Fleet) -> int:
    """Bytes free on A's pool filesystem, as df in A's mount namespace says."""
    return int(in_small(fl, "df", "-B1", "--output=avail", POOL_DIR).split()[-1])


@pytest.fixture(scope="module")
def fleet(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    assert len(lab["hosts"]) == LAB_HOSTS
    repo = tmp_path_factory.mktemp("resources") / "fleet"
    (repo / "proxies").mkdir(parents=True)
    fl = Fleet(lab, repo)
    # A's pool on a small filesystem of its own (the mount lives and dies with A's mount
    # namespace); the lab goes down after the module so that no later module inherits it.
    in_small(fl, "mount", "-t", "tmpfs", "-o", f"size={POOL_SIZE},mode=0711", "pfpool", POOL_DIR)
    try:
        virsh(fl.small, "pool-refresh", "default")
        images = (lab_config.STATE / "images.yaml").read_text().splitlines()[1:]
        hosts = "".join(
            f"    - name: {h['name']}\n      address: {h['address']}\n      port: {h['port']}\n"
            f"      user: {h['user']}\n      zone: zone-a\n      pool: default\n"
            "      network: {bridge: br0}\n      domainType: qemu\n      cpuMode: none\n"
            for h in lab["hosts"]
        )
        machines = {"tiny": 4, "big": 40, "huge": 10000}
        (repo / "fleet.yaml").write_text(
            "apiVersion: proxyfleet/v1\nkind: Fleet\nmetadata:\n  name: res\nspec:\n"
            + "".join(f"  {line}\n" for line in images)
            + "  machineTypes:\n"
            + "".join(
                f"    {key}:\n      vcpus: 1\n      memoryMiB: 512\n      diskGiB: {gib}\n"
                for key, gib in machines.items()
            )
            + "  hosts:\n"
            + hosts
            + "  policy:\n    prune: true\n    maxDeletesPerRun: 5\n    allowEmpty: false\n"
            "    overcommit:\n      disk: 10\n"
        )
        fl.put("r-big", "big")
        fl.put("r-huge", "huge")
        fl.put("r-full", "tiny", pin=fl.small)
        git(repo, "init", "-q", "-b", "main")
        fl.commit("resources fleet")
        yield fl
    finally:
        lab_cli("down")
        print(f"test_e2e_resources: {time.monotonic() - STARTED:.0f} s since import")


def agent_ip(host: str, domain: str) -> str:
    try:
        out = virsh(host, "domifaddr", domain, "--source", "agent")
    except LabError:
        return ""
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[-2] == "ipv4" and not fields[-1].startswith("127."):
            return fields[-1].split("/")[0]
    return ""


def wait_serving(fl: Fleet, host: str, domain: str, *, timeout: float = 900) -> str:
    """The guest's IP once a request through its squid gets the lab's 204."""
    deadline = time.monotonic() + timeout
    while True:
        ip = agent_ip(host, domain)
        if ip and probe_through(ip, fl.lab["probeUrl"]).status == 204:
            return ip
        assert time.monotonic() < deadline, f"{domain} on {host} never served"
        time.sleep(5)


def domstate(host: str, domain: str) -> str:
    return virsh(host, "domstate", "--reason", domain).strip()


def test_a_create_that_does_not_fit_a_pool_lands_on_another_host_or_is_blocked_with_numbers(
    fleet: Fleet,
) -> None:
    free_before = pool_free(fleet)
    assert free_before > 2 * 2**30  # the tmpfs, not the machine's disk
    log_file = fleet.log_file()
    proc, started = start_apply(fleet.lab, fleet.repo, log_file)
    # Scenario 3 rides on this apply: once r-big's domain is started on B, and while apply
    # waits for its health, libvirtd on B is stopped (its socket goes) and started again.
    created = re.compile(rf"rpc=virDomainCreate host={fleet.roomy} domain=pf-res-r-big-\S+ ")
    try:
        deadline = time.monotonic() + 900
        while not created.search(log_file.read_text()):
            assert proc.poll() is None, log_file.read_text()[-4000:]
            assert time.monotonic() < deadline, "r-big was never started"
            time.sleep(0.2)
        pid = daemon_pid(fleet.roomy, "libvirtd")
        fleet.restarted_at = time.time()
        lab_daemon("stop", "libvirtd", fleet.roomy)
        # Down until apply's health wait has met the gap: sshd's "Connect failed" for a
        # socket that is not there, which must be told from refused forwarding.
        while MISSING not in log_file.read_text():
            assert proc.poll() is None, log_file.read_text()[-4000:]
            assert time.monotonic() < deadline, "apply never called B while libvirtd was down"
            time.sleep(0.5)
        lab_daemon("start", "libvirtd", fleet.roomy)
        assert daemon_pid(fleet.roomy, "libvirtd") not in (None, pid)
        print(f"libvirtd on {fleet.roomy} restarted {time.monotonic() - started:.0f} s in")
    finally:
        applied = fleet.first = finish_apply(proc, started, log_file)

    actions = {a["proxy"]: a for a in applied.result["plan"]["actions"]}
    big, huge, full = actions["r-big"], actions["r-huge"], actions["r-full"]
    assert big["action"] == "create" and big["host"] == fleet.roomy, big
    assert full["action"] == "create" and full["host"] == fleet.small, full
    assert huge["action"] == "blocked" and huge["blocks"] == "create", huge
    print(f"r-huge: {huge['reason']}")
    for host in (fleet.small, fleet.roomy):
        # r-full and r-big, earlier in the plan, upload the base there: it counts no more.
        numbers = rf"{host}: [\d.]+ GiB free in pool default, needs 1000\.0 GiB"
        assert re.search(numbers, huge["reason"]), huge
    # A's number is its tmpfs (2.5 GiB less what is in it), not the machine's disk, less
    # what the plan promised r-full there: its disk (0.4 GiB counted) and the base image
    # it uploads into A's empty pool (about 0.3 GiB, sized from the image cache).
    a_free = re.search(rf"{fleet.small}: ([\d.]+) GiB free", huge["reason"])
    assert a_free is not None and float(a_free[1]) <= free_before / 2**30 - 0.4 - 0.2, huge
    proxies = applied.proxies()
    assert proxies["r-big"]["host"] == fleet.roomy and proxies["r-full"]["host"] == fleet.small
    for name in ("r-big", "r-full"):
        entry = proxies[name]
        assert entry["state"] == "running", entry
        wait_serving(fleet, entry["host"], entry["domain"])
    assert [o for o in applied.result["outcomes"] if o["result"] != "succeeded"] == []

    (fleet.repo / "proxies" / "r-huge.yaml").unlink()
    fleet_yaml = fleet.repo / "fleet.yaml"
    huge_type = "    huge:\n      vcpus: 1\n      memoryMiB: 512\n      diskGiB: 10000\n"
    fleet_yaml.write_text(fleet_yaml.read_text().replace(huge_type, ""))
    fleet.commit("r-huge fits nowhere: the proxy and its machine type go")
    settled = fleet.apply()
    assert settled.mutating_calls() == [], settled.result["plan"]
    assert settled.code == 0, settled.result
    assert {p["health"] for p in settled.result["proxies"]} == {"healthy"}


def test_a_libvirtd_restart_keeps_streamlocal(fleet: Fleet) -> None:
    applied = fleet.first
    assert applied is not None and fleet.restarted_at
    assert REFUSED not in applied.log and "virt-ssh-helper" not in applied.log
    # B was asked again after the restart, and answered (over a new libvirt connection).
    later = [
        msg
        for when, msg in applied.events()
        if when > fleet.restarted_at and re.search(rf"rpc=\w+ host={fleet.roomy} .*duration", msg)
    ]
    assert later, applied.log[-4000:]
    assert any(
        msg.startswith("rpc=virConnectOpen") and "via=openssh-streamlocal" in msg for msg in later
    ), later
    check = fleet.cli("hosts", "check", "--no-kvm-probe", "--json", "--host", fleet.roomy)
    # Only the SSH item is this scenario's: the capacity item reads the machine's free
    # memory at that moment, which the other labs on this machine move (once 249 MiB).
    assert check.returncode in (0, 3), check.stdout + check.stderr
    reports = {r["host"]: r for r in json.loads(check.stdout)}
    ssh = next(i for i in reports[fleet.roomy]["items"] if i["name"] == "ssh")
    assert ssh["ok"] and ssh["detail"].endswith("via openssh-streamlocal"), ssh
    # Guests run on this host's br0, whose MAC the lab sets (lab.config bridge_mac): the
    # check reads it from sysfs and has no warning of an ARP table emptied by a guest's
    # going (tests/test_host_adapter_units.py has one for a bridge that follows a tap).
    network = next(i for i in reports[fleet.roomy]["items"] if i["name"] == "network")
    assert network["detail"] == "bridge 'br0' up", network


def test_console_attaches_a_terminal_to_the_vms_serial_getty_and_ctrl_bracket_detaches(
    fleet: Fleet,
) -> None:
    """Issue 16: ``proxyfleet console`` on r-big (on B, serving since scenario 1, so its
    runcmd has started the serial getty), in a pty as an operator's terminal: Enter brings
    the getty's prompt, which names the proxy (its hostname); a second console is refused
    while this one is attached; Ctrl-] ends the session with exit 0."""
    run = console_login(fleet.lab, fleet.repo, "r-big", timeout=300)
    print(f"console: connected {run.connected:.1f} s, login prompt {run.prompt:.1f} s after start")
    assert re.search(r"Connected to pf-res-r-big-[0-9a-f]{8} on " + fleet.roomy, run.text), run.text
    assert run.code == 0, run.text
    assert "Disconnected from pf-res-r-big-" in run.text and "(escape)" in run.text, run.text
    assert run.second.returncode == 1, run.second
    assert "Active console session exists" in run.second.stderr, run.second.stderr


def test_a_vm_paused_by_a_full_pool_is_reported_then_resumed_and_healthy(fleet: Fleet) -> None:
    host = fleet.small
    domain = next(p for p in fleet.apply().result["proxies"] if p["name"] == "r-full")["domain"]
    assert domstate(host, domain) == "running (booted)"
    free = pool_free(fleet)
    in_small(fleet, "fallocate", "-l", str(free - 16 * MIB), f"{POOL_DIR}/filler")
    assert pool_free(fleet) < 32 * MIB
    command = {
        "execute": "guest-exec",
        "arguments": {
            "path": "/bin/dd",
            "arg": ["if=/dev/urandom", "of=/var/tmp/fill", "bs=1M", "count=256", "conv=fsync"],
        },
    }
    virsh(host, "qemu-agent-command", domain, json.dumps(command))
    deadline = time.monotonic() + 300
    while (state := domstate(host, domain)) != "paused (I/O error)":
        assert state.startswith("running"), state
        assert time.monotonic() < deadline, state
        time.sleep(2)

    reported = fleet.apply()
    (kept,) = [a for a in reported.result["plan"]["actions"] if a["proxy"] == "r-full"]
    assert kept["action"] == "keep", kept
    print(f"r-full: {kept['reason']}")
    assert re.search(
        r"paused by the hypervisor \(I/O error\); pool default has 0\.0 GiB free", kept["reason"]
    ), kept
    entry = reported.proxies()["r-full"]
    assert entry["state"] == "paused", entry
    assert "I/O error" in json.dumps(entry), entry
    assert reported.mutating_calls() == [], reported.mutating_calls()
    assert domstate(host, domain) == "paused (I/O error)"

    in_small(fleet, "rm", f"{POOL_DIR}/filler")
    assert pool_free(fleet) > 2**30
    resumed = fleet.apply()
    (start,) = [a for a in resumed.result["plan"]["actions"] if a["proxy"] == "r-full"]
    assert start["action"] == "start" and "resumes it" in start["reason"], start
    assert domstate(host, domain).startswith("running"), domstate(host, domain)
    wait_serving(fleet, host, domain, timeout=600)
    final = fleet.apply()
    assert final.mutating_calls() == [] and final.code == 0, final.result
    assert final.proxies()["r-full"]["health"] == "healthy", final.proxies()["r-full"]
