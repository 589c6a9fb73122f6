"""End to end on the 2-host lab: `proxyfleet apply` against real hypervisors and real guests.

Three proxies in two zones, UEFI and BIOS: every VM boots, reports its IP through the guest
agent, and relays the lab's 204 probe through its squid; a second apply makes no mutating
libvirt call; a removed manifest deletes the VM with its overlay, seed and NVRAM.
The tests run in file order and share one fleet repo.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lab import config as lab_config

PROXIES = {  # name: (zone, image key)
    "e2e-a-uefi": ("zone-a", "debian12"),
    "e2e-a-bios": ("zone-a", "debian12-bios"),
    "e2e-b-uefi": ("zone-b", "debian12"),
}
MUTATING = re.compile(
    r"rpc=vir\w*(Create|Define|Destroy|Undefine|Delete|Upload|Set|Shutdown|Reboot|Resume|"
    r"Suspend|Build|Wipe|Resize|Attach|Detach)\w*"
)


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=lab", "-c", "user.email=lab@localhost", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


def proxy_manifest(name: str, zone: str, image: str, probe_url: str) -> str:
    return (
        "apiVersion: proxyfleet/v1\nkind: Proxy\n"
        f"metadata:\n  name: {name}\n"
        f"spec:\n  placement:\n    zone: {zone}\n    image: {image}\n    machineType: small\n"
        "  cloudInit:\n    userData: |\n      #cloud-config\n      runcmd:\n"
        f"        - [sh, -c, 'echo {name} > /run/proxyfleet-e2e']\n"
        f"  health:\n    probeURL: {probe_url}\n    expectStatus: 204\n    timeoutSeconds: 10\n"
    )


@pytest.fixture(scope="module")
def fleet_repo(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("fleet")
    state = lab_config.STATE
    fleet = (
        "apiVersion: proxyfleet/v1\nkind: Fleet\nmetadata:\n  name: e2e\nspec:\n"
        + "".join(f"  {line}\n" for line in (state / "images.yaml").read_text().splitlines()[1:])
        + "  machineTypes:\n    small:\n      vcpus: 1\n      memoryMiB: 1024\n      diskGiB: 4\n"
        + "".join(f"  {line}\n" for line in (state / "hosts.yaml").read_text().splitlines()[1:])
        + "  policy:\n    prune: true\n    maxDeletesPerRun: 5\n    allowEmpty: false\n"
    )
    (repo / "fleet.yaml").write_text(fleet)
    (repo / "proxies").mkdir()
    for name, (zone, image) in PROXIES.items():
        (repo / "proxies" / f"{name}.yaml").write_text(
            proxy_manifest(name, zone, image, lab["probeUrl"])
        )
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "e2e fleet")
    return repo


def apply(lab: dict[str, Any], repo: Path, *, verbose: bool = False) -> tuple[dict[str, Any], str]:
    state_dir = lab_config.STATE / "e2e-proxyfleet"
    cmd = [
        sys.executable,
        "-m",
        "reconciler",
        *(["-v"] if verbose else []),
        "apply",
        "--yes",
        "--json",
        "--repo",
        str(repo),
        "--ssh-key",
        lab["sshKey"],
        "--known-hosts",
        lab["knownHosts"],
        "--state-dir",
        str(state_dir),
    ]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False)
    print(f"apply took {time.monotonic() - started:.0f}s, exit {proc.returncode}")
    assert proc.stdout, proc.stderr[-3000:]
    return json.loads(proc.stdout), proc.stderr


def probe_through(ip: str, url: str) -> int | None:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://{ip}:3128"}))
    try:
        with opener.open(url, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return None


def ssh(lab: dict[str, Any], host: str, command: str) -> str:
    address = next(h["address"] for h in lab["hosts"] if h["name"] == host)
    proc = subprocess.run(
        [
            "ssh",
            "-i",
            lab["sshKey"],
            "-o",
            f"UserKnownHostsFile={lab['knownHosts']}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            f"root@{address}",
            command,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return proc.stdout


def test_apply_boots_every_proxy_and_each_relays_the_lab_probe(
    lab: dict[str, Any], fleet_repo: Path
) -> None:
    result, _ = apply(lab, fleet_repo)
    proxies = {p["name"]: p for p in result["proxies"]}
    assert sorted(proxies) == sorted(PROXIES), result["problems"]
    subnets = {h["name"]: h["guestSubnet"].rsplit(".", 1)[0] + "." for h in lab["hosts"]}
    for name, (zone, _) in PROXIES.items():
        proxy = proxies[name]
        assert proxy["state"] == "running", proxy
        assert proxy["zone"] == zone and proxy["host"] == (
            "pfhost1" if zone == "zone-a" else "pfhost2"
        )
        assert proxy["ip"].startswith(subnets[proxy["host"]]), proxy
        assert proxy["health"] == "healthy", proxy
        # Not only apply's word for it: the test itself goes through each squid.
        assert probe_through(proxy["ip"], lab["probeUrl"]) == 204, proxy
    assert result["exitCode"] == 0, result["problems"]
    ready = next(c for c in result["conditions"] if c["type"] == "Ready")
    assert ready["status"] is True, ready


def test_a_second_apply_makes_no_mutating_libvirt_call(
    lab: dict[str, Any], fleet_repo: Path
) -> None:
    result, log = apply(lab, fleet_repo, verbose=True)
    assert {a["action"] for a in result["plan"]["actions"]} == {"keep"}
    assert "rpc=virDomainLookupByName" in log or "rpc=virConnectGetAllDomainStats" in log
    assert MUTATING.findall(log) == []
    assert result["exitCode"] == 0, result["problems"]


def test_a_removed_manifest_deletes_its_vm_overlay_seed_and_nvram(
    lab: dict[str, Any], fleet_repo: Path
) -> None:
    before, _ = apply(lab, fleet_repo)
    domain = next(p["domain"] for p in before["proxies"] if p["name"] == "e2e-b-uefi")
    pool_dir = "/var/lib/libvirt/images"
    assert domain in ssh(lab, "pfhost2", f"ls {pool_dir} /var/lib/libvirt/qemu/nvram")
    git(fleet_repo, "rm", "-q", "proxies/e2e-b-uefi.yaml")
    git(fleet_repo, "commit", "-q", "-m", "remove e2e-b-uefi")
    result, _ = apply(lab, fleet_repo)
    deletes = [a for a in result["plan"]["actions"] if a["action"] == "delete"]
    assert [a["domain"] for a in deletes] == [domain]
    assert result["exitCode"] == 0, result["problems"]
    assert domain not in ssh(lab, "pfhost2", "virsh -q -c qemu:///system list --all --name")
    assert domain not in ssh(lab, "pfhost2", f"ls {pool_dir} /var/lib/libvirt/qemu/nvram")
