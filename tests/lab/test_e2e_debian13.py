"""End to end on a mixed lab: a Debian 13 hypervisor (libvirt 11, QEMU 10) beside Debian 12,
and the two ways a guest without a running agent is still found and served (issue 14, 4-5).

Two lab hosts: A runs the machine's Debian 12 libvirt 9.0 / QEMU 7.2, B (``--debian13 1``)
runs libvirtd, virtlogd, sshd, dnsmasq and the probe server from the cached trixie root
(``lab/hostroot.py``, entered with pivot_root), installed as docs/hosts.md says, without
Recommends (so without libvirt's interface driver). The fleet has both: B on its bridge
``br0``, A on its libvirt network ``labnet`` (forward mode open, DHCP by libvirt's own
dnsmasq, made by ``lab up``). Two proxies are pinned to B, one to A, and they share their
guests across the scenarios, in file order (the agentoff image is ``lab/imagevariant.py``'s:
qemu-guest-agent installed, started by nothing):

1. ``hosts check`` (KVM probe included) on both: each host's libvirt and QEMU versions
   printed and asserted (9.x / 7.x on A, 11.x / 10.x on B); B's bridge found in
   /sys/class/net since libvirt there has no interface driver; A's network active; the probe
   decided on both.
2. One apply creates a UEFI and a BIOS proxy on B and ``n-lease``, a BIOS proxy of the
   agentoff image with ``installGuestAgent: false``, on A; all three serve the lab's 204
   through the squid their userData starts; NVRAM only for UEFI; a second apply makes no
   mutating call.
3. ``n-lease``: no agent answers in its guest (so the agentoff image starts none by
   itself); its address came from libvirt's DHCP lease on ``labnet`` (apply's log names the
   source) and its squid serves.
4. A changed spec replaces the UEFI VM on B: userData v2, the agentoff image, and a
   vendor-data script of the proxy's own. The new one is defined, started and found healthy
   before the old one is destroyed and undefined (NVRAM with it); Via says v2. The
   replacement is the guest of scenario 5, so the agent case costs no boot of its own.
5. In that replacement proxyfleet's vendor-data script (``installGuestAgent`` left true)
   started the agent, which reports the proxy's address, and the user's script ran too (its
   marker file read through the agent).
6. Every manifest removed: every VM, overlay, seed and NVRAM file of the fleet gone.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import time
from typing import Any

import pytest
from labutil import (
    ROOT,
    SQUID_BEFORE,
    Applied,
    apply_command,
    finish_apply,
    git,
    nvram_files,
    pool_files,
    probe_through,
    virsh,
)
from test_e2e_apply import OK, Fleet, agent_ip, assert_healthy, files_of, settle

from lab import config as lab_config
from lab.hosts import LabError

LAB_HOSTS = 2
LAB_DEBIAN13 = 1
UEFI, BIOS = "debian12", "debian12-bios"
AGENTOFF, AGENTOFF_UEFI = "debian12-agentoff-bios", "debian12-agentoff"
FIRST = {"n-uefi": UEFI, "n-bios": BIOS}
MARKER = "/var/lib/pf-lab-user-vendor-data"
VENDOR = f"#!/bin/sh\n# the proxy's own vendor-data\necho n-uefi-user-vendor-data > {MARKER}\n"
STARTED = time.monotonic()


class MixedFleet(Fleet):
    """test_e2e_apply's fleet helpers, for fleet ``d13`` whose proxies are pinned to A or B."""

    def where(self, proxy: str) -> tuple[str, str]:
        found = [
            (host, name)
            for host in self.hosts
            for name in virsh(host, "list", "--all", "--name").split()
            if name.startswith(f"pf-d13-{proxy}-")
        ]
        assert len(found) == 1, found
        return found[0]

    def apply(self) -> Applied:
        """apply with a replace timeout for this machine's load: at load ~20 a TCG replacement
        needed more than the default 600 s to serve, and the replace was (rightly) given up."""
        config = self.repo.parent / "proxyfleet.yaml"
        config.write_text(f"repo:\n  url: {self.repo}\nreplaceTimeoutSeconds: 1800\n")
        log_file = self.log_file()
        started = time.monotonic()
        with open(log_file, "w") as log:
            proc = subprocess.Popen(
                [*apply_command(self.lab, self.repo), "--config", str(config)],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        return finish_apply(proc, started, log_file)

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

    @property
    def debian13(self) -> str:
        return next(h["name"] for h in self.lab["hosts"] if h["kind"] == "debian13")

    @property
    def debian12(self) -> str:
        return next(h["name"] for h in self.lab["hosts"] if h["kind"] == "debian12")

    created: Applied
    """The apply that created the first three proxies (scenario 2)."""
    serving: Applied
    """The apply that found them serving (``created``, or the next one)."""
    replaced: Applied
    """The apply of scenario 4's replace."""


@pytest.fixture(scope="module")
def fleet(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> MixedFleet:
    assert [h["kind"] for h in lab["hosts"]] == ["debian12", "debian13"], lab["hosts"]
    repo = tmp_path_factory.mktemp("d13") / "fleet"
    (repo / "proxies").mkdir(parents=True)
    fl = MixedFleet(lab, repo)
    images = (lab_config.STATE / "images.yaml").read_text().splitlines()[1:]
    network = {"debian12": "{network: labnet}", "debian13": "{bridge: br0}"}
    hosts = "".join(
        f"    - name: {h['name']}\n      address: {h['address']}\n      port: {h['port']}\n"
        f"      user: {h['user']}\n      zone: {fl.zones[h['name']]}\n      pool: default\n"
        f"      network: {network[h['kind']]}\n      domainType: qemu\n      cpuMode: none\n"
        for h in lab["hosts"]
    )
    (repo / "fleet.yaml").write_text(
        "apiVersion: proxyfleet/v1\nkind: Fleet\nmetadata:\n  name: d13\nspec:\n"
        + "".join(f"  {line}\n" for line in images)
        + "  machineTypes:\n    tiny:\n      vcpus: 1\n      memoryMiB: 512\n      diskGiB: 4\n"
        + "  hosts:\n"
        + hosts
        + "  policy:\n    prune: true\n    maxDeletesPerRun: 5\n    allowEmpty: true\n"
    )
    for name, image in FIRST.items():
        fl.put(name, fl.zones[fl.debian13], image, pin=fl.debian13)
    a = fl.debian12
    fl.put("n-lease", fl.zones[a], AGENTOFF, pin=a, agent=False, mask_agent=False)
    git(repo, "init", "-q", "-b", "main")
    fl.commit("two proxies on the Debian 13 host, one agentoff proxy without agent on labnet")
    return fl


def boot_times(applied: Applied, domain: str, *, then: Applied | None = None) -> str:
    """From virDomainCreate to the first address (in ``applied``'s log, else in the log of
    ``then``, the apply after it) and to the end of ``applied``, as the logs say."""
    started = applied.first(rf"rpc=virDomainCreate host=\S+ domain={domain} {OK}")
    pattern = rf"address of {domain} from "
    logs = [a for a in (applied, then) if a is not None and re.search(pattern, a.log)]
    address = f"{logs[0].first(pattern) - started:.0f} s" if logs else "never"
    ended = applied.events()[-1][0] - started
    return f"first address after {address}, the creating apply ended {ended:.0f} s after start"


def agent_file(host: str, domain: str, path: str) -> str:
    """The guest file ``path`` read through its qemu-guest-agent (guest-file-open/read)."""

    def agent(command: str, **arguments: object) -> Any:
        request = json.dumps({"execute": command, "arguments": arguments})
        return json.loads(virsh(host, "qemu-agent-command", domain, request))["return"]

    handle = agent("guest-file-open", path=path, mode="r")
    try:
        read = agent("guest-file-read", handle=handle, count=4096)
    finally:
        agent("guest-file-close", handle=handle)
    return base64.b64decode(read["buf-b64"]).decode()


def test_hosts_check_reports_libvirt_and_qemu_of_each_host_and_the_debian13_host_is_ready(
    fleet: MixedFleet,
) -> None:
    started = time.monotonic()
    check = fleet.cli("hosts", "check", "--json")
    reports = {r["host"]: r for r in json.loads(check.stdout)}
    print(f"hosts check (KVM probe included) took {time.monotonic() - started:.0f} s")
    kinds = {h["name"]: h["kind"] for h in fleet.lab["hosts"]}
    for name, report in reports.items():
        kvm = next(i for i in report["items"] if i["name"] == "kvm")
        print(
            f"{name} ({kinds[name]}): libvirt {report['libvirt_version']}, "
            f"QEMU {report['qemu_version']}; kvm: {kvm['detail']}"
        )
        assert report["kvm_usable"] is not None, kvm
    a, b = (reports[h["name"]] for h in fleet.lab["hosts"])
    assert a["libvirt_version"].startswith("9.") and a["qemu_version"].startswith("7."), a
    assert b["libvirt_version"].startswith("11.") and b["qemu_version"].startswith("10."), b
    assert check.returncode == 0, check.stdout
    network = next(i for i in b["items"] if i["name"] == "network")
    assert network["detail"] == (
        "bridge 'br0' present (seen in /sys/class/net; libvirt has no interface driver)"
    )
    labnet = next(i for i in a["items"] if i["name"] == "network")
    assert labnet["detail"] == "network 'labnet' active", labnet


def test_uefi_and_bios_proxies_on_libvirt_11_and_an_agentless_one_on_labnet_serve(
    fleet: MixedFleet,
) -> None:
    applied = fleet.apply()
    everyone = [*FIRST, "n-lease"]
    assert sorted(a["proxy"] for a in applied.actions("create")) == sorted(everyone)
    final = settle(fleet, applied, everyone)
    for name, image in FIRST.items():
        entry = assert_healthy(fleet, final, name)
        assert entry["host"] == fleet.debian13, entry
        has_nvram = any(f.startswith(entry["domain"]) for f in nvram_files(entry["host"]))
        assert has_nvram == (image == UEFI), (entry, nvram_files(entry["host"]))
    subnet = next(h["networkSubnet"] for h in fleet.lab["hosts"] if h["kind"] == "debian12")
    entry = final.proxies()["n-lease"]
    assert entry["health"] == "healthy" and entry["host"] == fleet.debian12, entry
    assert entry["ip"].startswith(subnet.rsplit(".", 1)[0] + "."), (entry, subnet)
    probe = probe_through(entry["ip"], fleet.lab["probeUrl"])
    assert probe.status == 204 and f"n-lease-v1-{SQUID_BEFORE}" in probe.via, (entry, probe)
    for name in everyone:
        print(f"{name}: {boot_times(applied, final.proxies()[name]['domain'], then=final)}")
    fleet.created, fleet.serving = applied, final
    again = fleet.apply()
    assert {a["action"] for a in again.result["plan"]["actions"]} == {"keep"}
    assert again.mutating_calls() == [] and again.code == 0, again.result["problems"]


def test_a_guest_without_agent_on_a_libvirt_network_is_found_by_its_dhcp_lease(
    fleet: MixedFleet,
) -> None:
    host, domain = fleet.where("n-lease")
    ip = fleet.serving.proxies()["n-lease"]["ip"]
    # Nothing in the agentoff image starts the agent: its channel never connects.
    with pytest.raises(LabError, match="guest agent is not connected"):
        virsh(host, "domifaddr", domain, "--source", "agent")
    assert f"{ip}/24" in virsh(host, "domifaddr", domain, "--source", "lease")
    mac = virsh(host, "domiflist", domain).split()[-1]
    leases = virsh(host, "net-dhcp-leases", lab_config.LIBVIRT_NETWORK, "--mac", mac)
    assert f"{ip}/24" in leases, leases
    # apply found it there (ARP is asked only when the lease names nothing)
    log = fleet.serving.log
    sources = re.findall(rf"address of {domain} from (.+?): ", log)
    assert sources and sources[-1] == "the lease source", sources
    assert f"address of {domain} from the lease source: {ip}" in log
    assert probe_through(ip, fleet.lab["probeUrl"]).status == 204


def test_a_changed_spec_replaces_the_vm_on_libvirt_11_new_one_first(fleet: MixedFleet) -> None:
    host, old = fleet.where("n-uefi")
    fleet.put("n-uefi", fleet.zones[host], AGENTOFF_UEFI, tag="v2", pin=host, vendor_data=VENDOR)
    fleet.commit("n-uefi: new squid config, the agentoff image, a vendor-data of its own")
    applied = fleet.apply()
    (replace,) = applied.actions("replace")
    new = replace["domain"]
    assert replace["replaces"] == {"host": host, "domain": old} and new != old, replace
    assert applied.code == 0, applied.result["problems"]
    entry = assert_healthy(fleet, applied, "n-uefi", tag="v2")
    assert entry["domain"] == new
    defined = applied.first(rf"rpc=virDomainDefineXML host=\S+ domain={new} {OK}")
    started = applied.first(rf"rpc=virDomainCreate host=\S+ domain={new} {OK}")
    healthy = applied.first(rf"Proxy VM {new} on \S+ passed its health check")
    destroyed = applied.first(rf"rpc=virDomainDestroy host={host} domain={old} {OK}")
    undefined = applied.first(rf"rpc=virDomainUndefineFlags host={host} domain={old} .*{OK}")
    assert defined <= started < healthy <= destroyed <= undefined
    names = virsh(host, "list", "--all", "--name").split()
    assert old not in names and new in names
    assert not files_of(old) & pool_files(host), pool_files(host)
    assert not any(f.startswith(old) for f in nvram_files(host)), nvram_files(host)
    print(f"replace: {boot_times(applied, new)}")
    fleet.replaced = applied


def test_proxyfleets_vendor_data_started_the_agent_of_the_agentoff_image_and_the_users_ran(
    fleet: MixedFleet,
) -> None:
    started = time.monotonic()
    host, domain = fleet.where("n-uefi")
    ip = fleet.replaced.proxies()["n-uefi"]["ip"]
    assert agent_ip(host, domain) == ip
    assert agent_file(host, domain, MARKER) == "n-uefi-user-vendor-data\n"
    print(f"agent address and marker checked in {time.monotonic() - started:.1f} s")


def test_removed_manifests_delete_every_vm_overlay_seed_and_nvram(fleet: MixedFleet) -> None:
    doms = {
        host: [d for d in virsh(host, "list", "--all", "--name").split() if d.startswith("pf-d13-")]
        for host in fleet.hosts
    }
    assert len(doms[fleet.debian13]) == 2 and len(doms[fleet.debian12]) == 1, doms
    for name in [*FIRST, "n-lease"]:
        (fleet.repo / "proxies" / f"{name}.yaml").unlink()
    # Removing every proxy is a 100 % shrink: the guard stalls it unless acknowledged.
    fleet_yaml = fleet.repo / "fleet.yaml"
    fleet_yaml.write_text(fleet_yaml.read_text() + "    acknowledgeShrinkTo: 0\n")
    fleet.commit("no proxies")
    applied = fleet.apply()
    every = sorted(d for found in doms.values() for d in found)
    assert sorted(a["domain"] for a in applied.actions("delete")) == every
    assert applied.code == 0, applied.result["problems"]
    for host, gone in doms.items():
        left = virsh(host, "list", "--all", "--name").split()
        assert not [d for d in left if d.startswith("pf-d13-")], left
        for domain in gone:
            assert not files_of(domain) & pool_files(host), pool_files(host)
        assert not any(f.startswith("pf-d13-") for f in nvram_files(host)), nvram_files(host)
    print(f"test_e2e_debian13: {time.monotonic() - STARTED:.0f} s since import")
