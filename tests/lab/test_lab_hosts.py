"""The lab itself: hosts come up reachable over SSH with libvirt, and go away without a trace."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from labutil import lab_cli

from lab import config as lab_config

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


def lab_traces() -> list[str]:
    """Everything of the lab still visible from the root namespace."""
    traces = []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    traces += [f"netns {n}" for n in netns.split() if n.startswith("pfhost")]
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    traces += [
        f"link {line.split(':')[1].strip()}" for line in links.splitlines() if "pfhost" in line
    ]
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True).stdout
    traces += [f"route {r}" for r in routes.splitlines() if "pfhost" in r or "10.78." in r]
    state = str(STATE / "hosts")
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if state in cmd or "lab.servers" in cmd or "holder.sh" in cmd:
            traces.append(f"process {proc.name}: {cmd[:120]}")
    mounts = Path("/proc/self/mountinfo").read_text()
    traces += [f"mount {m}" for m in mounts.splitlines() if str(STATE) in m or "lab-run" in m]
    return traces


def test_lab_up_gives_every_host_ssh_and_libvirt_and_down_leaves_nothing() -> None:
    lab_cli("up", "--hosts", "2")
    lab_cli("up", "--hosts", "2")  # idempotent: a second up changes nothing and succeeds
    try:
        lab = json.loads((STATE / "lab.json").read_text())
        assert [h["name"] for h in lab["hosts"]] == ["pfhost1", "pfhost2"]
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
        assert "domainType: qemu" in hosts_yaml and "address: 10.77.2.2" in hosts_yaml
        status = lab_cli("status").stdout
        assert "libvirtd" in status and "sshd" in status
    finally:
        lab_cli("down")
    assert lab_traces() == []
    assert lab_cli("status").returncode == 3
