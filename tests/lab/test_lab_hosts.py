"""The lab itself: hosts come up reachable over SSH with libvirt, and go away without a trace."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from labutil import lab_cli

from lab import config as lab_config
from lab import hosts as lab_hosts

STATE = lab_config.STATE


def ssh(host: dict[str, object], command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            "ssh",
            "-i",
            str(STATE / "ssh" / "id_ed25519"),
            "-p",
            str(host["port"]),
            "-o",
            f"UserKnownHostsFile={STATE / 'ssh' / 'known_hosts'}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            "-o",
            "ConnectTimeout=10",
            f"{host['user']}@{host['address']}",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ours(name: str) -> bool:
    """Whether a netns or link name is one of this lab instance's hosts (others may run)."""
    return lab_config.HostLayout.from_name(name) is not None


def started(pid: int) -> str | None:
    """The process's start time (field 22 of its stat): tells a pid from a later reuse."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def lab_processes() -> dict[int, str | None]:
    """Every process in this instance's host namespaces: daemons, holders, guests."""
    found: dict[int, str | None] = {}
    for n in range(1, lab_config.MAX_HOSTS + 1):
        for proc in lab_hosts.processes_in_netns(lab_config.HostLayout(n).netns):
            found[proc.pid] = started(proc.pid)
    return found


def lab_traces(before: dict[int, str | None]) -> list[str]:
    """Everything of this lab instance still visible from the root namespace; ``before``
    holds the processes that ran in its namespaces before it was taken down."""
    traces = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    traces += [f"netns {n}" for n in netns.split() if ours(n)]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    names = [line.split(":")[1].strip().split("@")[0] for line in links.splitlines()]
    traces += [f"link {name}" for name in names if ours(name)]
    subnets = {lab_config.HostLayout(n).guest_subnet for n in range(1, lab_config.MAX_HOSTS + 1)}
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    traces += [
        f"route {r}"
        for r in routes.splitlines()
        if r.split()[0] in subnets or any(ours(word) for word in r.split())
    ]
    traces += [
        f"process {pid} (was in a lab namespace)"
        for pid, start in before.items()
        if start is not None and started(pid) == start
    ]
    state = str(STATE / "hosts")
    server = f"--port {lab_config.IMAGE_PORT}"
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state in cmd or ("lab.servers images" in cmd and server in cmd):
            traces.append(f"process {proc.name}: {cmd[:120]}")
    mounts = Path("/proc/self/mountinfo").read_text()
    traces += [f"mount {m}" for m in mounts.splitlines() if str(STATE) in m]
    return traces


def test_lab_up_gives_every_host_ssh_and_libvirt_and_down_leaves_nothing() -> None:
    lab_cli("up", "--hosts", "2")
    lab_cli("up", "--hosts", "2")  # idempotent: a second up changes nothing and succeeds
    first, second = lab_config.HostLayout(1), lab_config.HostLayout(2)
    before: dict[int, str | None] = {}
    try:
        lab = json.loads((STATE / "lab.json").read_text())
        assert [h["name"] for h in lab["hosts"]] == [first.name, second.name]
        assert [h["zone"] for h in lab["hosts"]] == ["zone-a", "zone-b"]
        assert oct((STATE / "ssh" / "id_ed25519").stat().st_mode & 0o777) == "0o600"
        for host in lab["hosts"]:
            out = ssh(
                host,
                "virsh -c qemu:///system version && hostname "
                "&& virsh -q -c qemu:///system pool-list --name",
            )
            assert out.returncode == 0, out.stderr
            assert "Running hypervisor: QEMU" in out.stdout
            assert host["name"] in out.stdout.split()
            assert "default" in out.stdout.split()
        hosts_yaml = (STATE / "hosts.yaml").read_text()
        assert "domainType: qemu" in hosts_yaml and f"address: {second.address}" in hosts_yaml
        status = lab_cli("status").stdout
        assert "libvirtd" in status and "sshd" in status
        before = lab_processes()
        assert len(before) >= 2 * 5, before  # holder, virtlogd, libvirtd, sshd, dnsmasq, probe
    finally:
        lab_cli("down")
    assert lab_traces(before) == []
    assert lab_cli("status").returncode == 3
