"""End to end on the lab: a ``domainType: kvm`` BIOS proxy, where KVM is usable.

``proxyfleet hosts check`` runs first, with its KVM probe (a throw-away transient kvm domain
booting a boot sector through real, protected and long mode; see
``adapters/hypervisor/hostcheck/kvmprobe.py``), and its report is asserted: the probe decided, the
host's libvirt and QEMU versions are there, and for this ``domainType: kvm`` host a KVM
that does not work fails the check. Only then, and only when the check says KVM is not
usable, is the proxy test skipped, with the check's own reason (on the lab machines: "KVM
stopped the probe guest ... paused ... once the boot sector entered 32-bit protected
mode", the nested-virtualization emulation failure). Where it is usable, one BIOS proxy
under KVM is created, serves the lab's 204 through its squid, and is deleted.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from labutil import ROOT, apply, git, probe_through, squid_user_data, virsh

from lab import config as lab_config
from lab.hosts import LabError
from reconciler.core.render.kvmguest import PROBE_DOMAIN

LAB_HOSTS = 1
NAME = "k-bios"


class KvmFleet:
    def __init__(self, lab: dict[str, Any], repo: Path) -> None:
        self.lab = lab
        self.repo = repo
        self.host = lab["hosts"][0]["name"]
        self.runs = 0

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [
                *(sys.executable, "-m", "reconciler", *args, "--repo", str(self.repo)),
                *("--ssh-key", self.lab["sshKey"], "--known-hosts", self.lab["knownHosts"]),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )

    def apply(self) -> Any:
        self.runs += 1
        return apply(self.lab, self.repo, self.repo.parent / f"apply-{self.runs}.log")


@pytest.fixture(scope="module")
def fleet(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Iterator[KvmFleet]:
    repo = tmp_path_factory.mktemp("kvm") / "fleet"
    (repo / "proxies").mkdir(parents=True)
    fl = KvmFleet(lab, repo)
    images = (lab_config.STATE / "images.yaml").read_text().splitlines()[1:]
    h = lab["hosts"][0]
    (repo / "fleet.yaml").write_text(
        "apiVersion: proxyfleet/v1\nkind: Fleet\nmetadata:\n  name: kvm\nspec:\n"
        + "".join(f"  {line}\n" for line in images)
        + "  machineTypes:\n    small:\n      vcpus: 1\n      memoryMiB: 512\n      diskGiB: 4\n"
        f"  hosts:\n    - name: {h['name']}\n      address: {h['address']}\n"
        f"      port: {h['port']}\n      user: {h['user']}\n      zone: zone-a\n"
        "      pool: default\n      network: {bridge: br0}\n      domainType: kvm\n"
        "      cpuMode: none\n"
        "  policy:\n    prune: true\n    allowEmpty: true\n"
    )
    user_data = "".join(f"      {line}\n" for line in squid_user_data(NAME).split("\n"))
    (repo / "proxies" / f"{NAME}.yaml").write_text(
        f"apiVersion: proxyfleet/v1\nkind: Proxy\nmetadata:\n  name: {NAME}\nspec:\n"
        "  placement:\n    zone: zone-a\n    image: debian12-bios\n    machineType: small\n"
        "  cloudInit:\n    userData: |\n"
        + user_data.rstrip(" \n")
        + f"\n  health:\n    probeURL: {lab['probeUrl']}\n    expectStatus: 204\n"
    )
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one kvm proxy")
    yield fl


def test_a_kvm_bios_proxy_boots_and_serves_where_hosts_check_says_kvm_is_usable(
    fleet: KvmFleet,
) -> None:
    started = time.monotonic()
    check = fleet.cli("hosts", "check", "--json")
    seconds = time.monotonic() - started
    report = json.loads(check.stdout)[0]
    kvm = next(item for item in report["items"] if item["name"] == "kvm")
    print(
        f"{fleet.host}: libvirt {report['libvirt_version']}, QEMU {report['qemu_version']}; "
        f"hosts check {seconds:.0f} s; kvm {'ok' if kvm['ok'] else 'FAIL'}: {kvm['detail']}"
    )
    assert report["libvirt_version"] and report["qemu_version"], report
    assert report["kvm_usable"] is not None, kvm  # the probe ran and decided
    assert PROBE_DOMAIN not in virsh(fleet.host, "list", "--all", "--name").split()
    if not report["kvm_usable"]:
        # A domainType: kvm host whose KVM does not work fails the check, naming why.
        assert check.returncode == 3 and not kvm["ok"], check.stdout
        assert kvm["detail"].startswith("not usable: ")
        assert "domainType: kvm guests will not run here" in kvm["detail"]
        pytest.skip(f"KVM is not usable on {fleet.host}, as hosts check says: {kvm['detail']}")
    assert check.returncode == 0 and kvm["ok"], check.stdout

    created = fleet.apply()
    assert [a["proxy"] for a in created.actions("create")] == [NAME], created.result
    domain = next(iter(domains(fleet.host)))
    assert "type='kvm'" in virsh(fleet.host, "dumpxml", domain).split("\n", 1)[0]
    deadline = time.monotonic() + 900
    while not serving(fleet, domain):
        assert time.monotonic() < deadline, f"{domain} never served under KVM"
        time.sleep(5)
    print(f"{NAME} under KVM served {time.monotonic() - started:.0f} s after the check began")

    (fleet.repo / "proxies" / f"{NAME}.yaml").unlink()
    git(fleet.repo, "commit", "-q", "-am", "no proxy")
    deleted = fleet.apply()
    assert [a["proxy"] for a in deleted.actions("delete")] == [NAME], deleted.result
    assert domains(fleet.host) == set()


def domains(host: str) -> set[str]:
    """This fleet's domains on the host (other modules' may still be there)."""
    return {d for d in virsh(host, "list", "--all", "--name").split() if d.startswith("pf-kvm-")}


def serving(fleet: KvmFleet, domain: str) -> bool:
    try:
        out = virsh(fleet.host, "domifaddr", domain, "--source", "agent")
    except LabError:  # no agent yet
        return False
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[-2] == "ipv4" and not fields[-1].startswith("127."):
            ip = fields[-1].split("/")[0]
            return probe_through(ip, fleet.lab["probeUrl"]).status == 204
    return False
