"""A proxy with a fixed address: its MAC, its network-config, its seed and domain, its load.

Pure rendering, read back: the network-config as cloud-init reads it (YAML), the seed
ISO with pycdlib, the domain XML with ElementTree. The planner's recreate rule is in
tests/plan_cases/ (the fixed_address_*, recreate*_ cases).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from test_manifests import MINIMAL_FLEET, write_repo
from test_seediso import make_spec, read_iso

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.core.plan.digest import proxy_digest
from reconciler.core.render.domainxml import domain_xml
from reconciler.core.render.netconfig import network_config
from reconciler.core.render.seediso import seed_files, seed_iso
from reconciler.model.fleet import FixedAddress, guest_mac

FIXED = FixedAddress(address="192.0.2.10/24", gateway="192.0.2.1", nameservers=("192.0.2.53",))


def _yaml(data: bytes) -> dict[str, Any]:
    loaded: dict[str, Any] = YAML(typ="safe").load(data.decode("utf-8"))
    return loaded


def test_the_mac_is_locally_administered_unicast_and_the_same_for_every_vm_of_a_proxy() -> None:
    mac = guest_mac("lab", "edge-1")
    first = int(mac.split(":")[0], 16)

    assert mac == guest_mac("lab", "edge-1")
    assert len(mac.split(":")) == 6
    assert first & 0x02, "locally administered bit set"
    assert not first & 0x01, "multicast bit clear"
    assert mac != guest_mac("lab", "edge-2")
    assert mac != guest_mac("home", "edge-1")


def test_network_config_is_v2_for_the_mac_with_address_route_and_nameservers() -> None:
    config = _yaml(network_config(FIXED, mac="06:00:00:00:00:01"))

    assert config == {
        "version": 2,
        "ethernets": {
            "eth0": {
                "match": {"macaddress": "06:00:00:00:00:01"},
                "set-name": "eth0",
                "dhcp4": False,
                "dhcp6": False,
                "addresses": ["192.0.2.10/24"],
                "gateway4": "192.0.2.1",
                "nameservers": {"addresses": ["192.0.2.53"]},
            }
        },
    }


def test_network_config_without_gateway_has_none_and_an_ipv6_one_is_gateway6() -> None:
    bare = _yaml(network_config(FixedAddress(address="192.0.2.10/24"), mac="06:00:00:00:00:01"))
    six = _yaml(
        network_config(
            FixedAddress(address="2001:db8::10/64", gateway="2001:db8::1"), mac="06:00:00:00:00:01"
        )
    )

    assert "gateway4" not in bare["ethernets"]["eth0"]
    assert "nameservers" not in bare["ethernets"]["eth0"]
    assert six["ethernets"]["eth0"]["gateway6"] == "2001:db8::1"


def test_the_seed_of_a_fixed_address_proxy_carries_its_network_config_for_its_mac() -> None:
    spec = replace(make_spec(), network=FIXED)

    _, files = read_iso(seed_iso(spec))

    config = _yaml(files["network-config"])
    assert config["ethernets"]["eth0"]["match"] == {"macaddress": guest_mac("lab", "edge-1")}
    assert config["ethernets"]["eth0"]["addresses"] == ["192.0.2.10/24"]


def test_a_seed_without_a_fixed_address_keeps_its_own_network_config_or_none() -> None:
    assert "network-config" not in seed_files(make_spec())
    assert seed_files(make_spec(network="version: 1\n"))["network-config"] == b"version: 1\n"


def test_the_domain_pins_the_mac_only_for_a_fixed_address_proxy() -> None:
    def macs(network: FixedAddress | None) -> list[str]:
        spec = replace(make_spec(), network=network)
        xml = ET.fromstring(domain_xml(spec, disk_path="/d.qcow2", seed_path="/s.iso"))
        return [m.get("address", "") for m in xml.iter("mac")]

    assert macs(FIXED) == [guest_mac("lab", "edge-1")]
    assert macs(None) == []


FIXED_PROXY = """\
kind: Proxy
metadata: {name: edge-1}
spec:
  placement: {zone: z1, image: deb, machineType: small}
  network: {address: 192.0.2.10/24, gateway: 192.0.2.1, nameservers: [192.0.2.53, 192.0.2.54]}
"""


def test_spec_network_loads_into_the_proxy_and_a_changed_address_changes_its_digest(
    tmp_path: Path,
) -> None:
    repo = load_repo_at(write_repo(tmp_path, {"fleet.yaml": MINIMAL_FLEET, "p.yaml": FIXED_PROXY}))
    proxy = repo.proxies[0]
    host = repo.fleet.hosts[0]
    image, machine_type = repo.fleet.images[0], repo.fleet.machine_types[0]

    def digest(network: FixedAddress | None) -> str:
        moved = replace(proxy, network=network)
        return proxy_digest(moved, host, image=image, machine_type=machine_type)

    assert proxy.network == FixedAddress(
        address="192.0.2.10/24", gateway="192.0.2.1", nameservers=("192.0.2.53", "192.0.2.54")
    )
    assert digest(proxy.network) != digest(replace(FIXED, address="192.0.2.11/24"))
    assert digest(proxy.network) != digest(None)
