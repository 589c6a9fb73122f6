"""A fixed-address proxy on the lab keeps its address through a replace (issue 41).

One lab host, one proxy with ``spec.network``: an address of the host's guest bridge
(``10.78.<g>.0/24``, gateway the bridge's ``10.78.<g>.1``) below its dnsmasq's DHCP range
(``.10``-``.250``), so no lease can ever hand it out. Driven by ``proxyfleet apply`` runs,
as runs act and return:

1. created: the guest holds the address (the test fetches through squid at it) and its NIC
   has the MAC derived from the fleet's and the proxy's names;
2. an image update (the lab image's zstd copy: a new url and sha256 for the key) recreates
   it in one apply: its first run deletes the old VM and creates nothing; its follow-up
   run creates the new VM, which answers on the same address with the same MAC. A sampler
   lists the host's running domains every second from the commit until the new VM
   serves: no sample holds two VMs of the proxy, and the old one is gone before the new
   one is defined.

Two TCG boots in all (~3 min each on a quiet machine); stream B of lab.suite.
"""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path
from typing import Any

import pytest
from labutil import (
    Applied,
    Sampler,
    apply,
    clear_domains,
    domains,
    git,
    layout,
    probe_through,
    squid_user_data,
    virsh,
)

from lab import config as lab_config
from lab import imagebuild, imageupdate
from reconciler.model.fleet import guest_mac

LAB_HOSTS = 1
FLEET = "e2ef"
PROXY = "fixed-1"
PREFIX = f"pf-{FLEET}-{PROXY}-"
IMAGE_KEY = "debian12"
SERVE_DEADLINE = 1500.0
"""Seconds a new VM may take to answer through squid: a TCG boot on a machine shared with
other labs (3 min quiet, 10+ at a load of 20)."""


class Rig:
    """The module's fleet repo, its one host and the fixed address."""

    def __init__(self, lab: dict[str, Any], repo: Path) -> None:
        self.lab = lab
        self.repo = repo
        self.host = lab["hosts"][0]["name"]
        host = layout(self.host)
        self.subnet = ipaddress.ip_network(host.guest_subnet)
        self.address = str(self.subnet.network_address + 5)
        self.gateway = host.bridge_address
        low, high = (ipaddress.ip_address(a) for a in host.dhcp_range)
        self.dhcp = (low, high)
        self.applies = 0

    def fleet_yaml(self, url: str, sha256: str) -> str:
        h = self.lab["hosts"][0]
        return (
            f"apiVersion: proxyfleet/v1\nkind: Fleet\nmetadata:\n  name: {FLEET}\nspec:\n"
            f"  images:\n    {IMAGE_KEY}:\n      url: {url}\n      sha256: {sha256}\n"
            "      format: qcow2\n      firmware: uefi\n"
            "  machineTypes:\n    small: {vcpus: 1, memoryMiB: 1024, diskGiB: 4}\n"
            f"  hosts:\n    - name: {h['name']}\n      address: {h['address']}\n"
            f"      port: {h['port']}\n      user: root\n      zone: zone-a\n      pool: default\n"
            "      network: {bridge: br0}\n      domainType: qemu\n      cpuMode: none\n"
            "  policy:\n    prune: true\n    maxDeletesPerRun: 5\n"
        )

    def proxy_yaml(self) -> str:
        user_data = "".join(f"      {line}\n" for line in squid_user_data(PROXY).split("\n"))
        return (
            f"apiVersion: proxyfleet/v1\nkind: Proxy\nmetadata:\n  name: {PROXY}\nspec:\n"
            f"  placement: {{zone: zone-a, image: {IMAGE_KEY}, machineType: small}}\n"
            f"  network:\n    address: {self.address}/{self.subnet.prefixlen}\n"
            f"    gateway: {self.gateway}\n"
            "  cloudInit:\n    userData: |\n" + user_data.rstrip(" \n") + "\n"
            f"  health:\n    probeURL: {self.lab['probeUrl']}\n    timeoutSeconds: 10\n"
        )

    def commit(self, message: str, *, url: str, sha256: str) -> None:
        (self.repo / "fleet.yaml").write_text(self.fleet_yaml(url, sha256))
        (self.repo / f"{PROXY}.yaml").write_text(self.proxy_yaml())
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", message)

    def apply(self) -> Applied:
        self.applies += 1
        applied = apply(self.lab, self.repo, self.repo.parent / f"apply-{self.applies}.log")
        outcomes = applied.result["outcomes"]
        assert all(o["result"] == "succeeded" for o in outcomes), (outcomes, applied.log[-3000:])
        return applied

    def vms(self) -> list[str]:
        return sorted(name for name in domains(self.host) if name.startswith(PREFIX))

    def serves(self) -> bool:
        return probe_through(self.address, self.lab["probeUrl"]).status == 204

    def wait_serving(self) -> float:
        """Seconds until squid answers at the fixed address (fails past SERVE_DEADLINE)."""
        started = time.monotonic()
        while not self.serves():
            waited = time.monotonic() - started
            assert waited < SERVE_DEADLINE, f"nothing answered at {self.address} in {waited:.0f} s"
            time.sleep(5)
        return time.monotonic() - started

    def mac_of(self, domain: str) -> str:
        rows = [line.split() for line in virsh(self.host, "domiflist", domain).splitlines()]
        macs = [row[-1] for row in rows if len(row) >= 5 and row[-1].count(":") == 5]
        assert len(macs) == 1, rows
        return macs[0]


@pytest.fixture(scope="module")
def rig(lab: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Rig:
    assert len(lab["hosts"]) == LAB_HOSTS
    clear_domains(lab["hosts"][0]["name"])  # what earlier modules (or runs) left there
    repo = tmp_path_factory.mktemp("fixed") / "fleet"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    made = Rig(lab, repo)
    made.commit("a fixed-address proxy", url=lab["image"]["url"], sha256=lab["image"]["sha256"])
    return made


def test_a_fixed_address_proxy_keeps_its_address_and_mac_through_an_image_update(
    rig: Rig,
) -> None:
    address = ipaddress.ip_address(rig.address)
    assert address in rig.subnet and not rig.dhcp[0] <= address <= rig.dhcp[1], rig.dhcp
    mac = guest_mac(FLEET, PROXY)
    timings: dict[str, float] = {}

    created = rig.apply()
    assert [a["proxy"] for a in created.actions("create")] == [PROXY]
    timings["create -> serving"] = created.seconds + rig.wait_serving()
    (old,) = rig.vms()
    assert rig.mac_of(old) == mac

    source = imagebuild.cached(lab_config.IMAGES_DIR)
    assert source is not None
    copy = imageupdate.recompressed(source)
    new_url = rig.lab["imageServer"].rstrip("/") + "/" + copy.path.name
    with Sampler(rig.host, interval=1.0) as sampler:
        rig.commit(f"{IMAGE_KEY}: a new image", url=new_url, sha256=copy.sha256)
        recreated = rig.apply()
        # The plan shown (the first run's) deletes the old VM and creates nothing; apply's
        # follow-up run creates the new one once the old is gone.
        assert recreated.actions("create") == [] and recreated.actions("replace") == []
        assert [(a["proxy"], a["domain"]) for a in recreated.actions("delete")] == [(PROXY, old)]
        outcomes = recreated.result["outcomes"]
        done = [(o["action"], o["proxy"]) for o in outcomes if o["action"] != "cleanup"]
        assert done == [("delete", PROXY), ("create", PROXY)], done
        deleted = recreated.first(rf"rpc=virDomainUndefineFlags host=\S+ domain={old} ")
        defined = recreated.first(r"rpc=virDomainDefineXML host=\S+ domain=")
        assert deleted < defined, "the old VM is gone before the new one is defined"
        timings["recreate -> serving"] = recreated.seconds + rig.wait_serving()
    (new,) = rig.vms()
    assert new != old
    assert rig.mac_of(new) == mac
    held = [sorted(d for d in seen if d.startswith(PREFIX)) for _, seen in sampler.samples]
    assert len(held) > 10, "the sampler saw the recreate"
    assert max(len(h) for h in held) == 1 and [old] in held and [new] in held, held
    assert all(h != [old] for h in held[held.index([new]) :]), "old VM back after the new"
    for what, seconds in timings.items():
        print(f"{what}: {seconds:.0f} s")
