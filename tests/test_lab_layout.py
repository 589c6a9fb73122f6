"""The lab's numbering: ten hosts per instance, none shared between instances; light hosts
(no DHCP, no probe, no libvirt network)."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from lab import config, hosts
from lab.config import HostLayout


def layouts_of(instance: int, monkeypatch: pytest.MonkeyPatch) -> list[HostLayout]:
    monkeypatch.setattr(config, "HOST_BASE", instance * 10)
    return [HostLayout(n) for n in range(1, config.MAX_HOSTS + 1)]


def test_every_instance_has_ten_hosts_whose_names_and_networks_no_other_instance_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, int] = {}
    for instance in range(config.MAX_INSTANCE + 1):
        for layout in layouts_of(instance, monkeypatch):
            for value in (
                layout.name,
                layout.address,
                layout.guest_subnet,
                layout.network_subnet,
                layout.bridge_mac,
            ):
                assert seen.setdefault(value, instance) == instance, value
    assert config.MAX_HOSTS == 10
    assert len(seen) == (config.MAX_INSTANCE + 1) * 10 * 5


def test_a_bridge_mac_is_unicast_locally_administered_and_below_every_guest_tap() -> None:
    """libvirt gives a guest's tap its MAC with the first byte fe: a bridge MAC below that
    would be kept by the kernel anyway; this one is set, so it never follows a tap."""
    mac = HostLayout(3).bridge_mac
    first = int(mac.split(":")[0], 16)
    assert first & 0x01 == 0 and first & 0x02 and mac < "fe:"
    assert len(mac.split(":")) == 6


def test_an_instance_claims_its_tenth_host_and_not_the_next_instances_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config, "HOST_BASE", 60)
    assert HostLayout.from_name("pfhost70") == HostLayout(10)
    assert HostLayout.from_name("pfhost61") == HostLayout(1)
    assert HostLayout.from_name("pfhost60") is None
    assert HostLayout.from_name("pfhost71") is None


@pytest.mark.parametrize(
    ("light", "started"),
    [
        (True, ["virtlogd", "libvirtd", "sshd"]),
        (False, ["virtlogd", "libvirtd", "sshd", "dnsmasq", "python", "labnet"]),
    ],
)
def test_a_light_host_starts_libvirt_and_sshd_only(
    monkeypatch: pytest.MonkeyPatch, light: bool, started: list[str]
) -> None:
    calls: list[str] = []
    for step in ("ensure_network", "ensure_host_files", "ensure_holder", "ensure_pool"):
        monkeypatch.setattr(hosts, step, lambda _host: None)
    monkeypatch.setattr(hosts, "host_root", lambda _host: None)
    monkeypatch.setattr(hosts, "start_daemon", lambda _host, name: calls.append(name))
    monkeypatch.setattr(hosts, "ensure_libvirt_network", lambda _host: calls.append("labnet"))
    hosts.up_host(HostLayout(1), light=light)
    assert calls == started


def test_labnet_is_an_open_network_with_dhcp_and_no_dns_in_the_hosts_own_subnet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(config, "HOST_BASE", 30)
    xml = ET.fromstring(hosts.network_xml(HostLayout(2)))
    assert xml.findtext("name") == "labnet"
    assert xml.find("forward").get("mode") == "open"  # type: ignore[union-attr]
    assert xml.find("dns").get("enable") == "no"  # type: ignore[union-attr]
    ip = xml.find("ip")
    assert (ip.get("address"), ip.get("netmask")) == ("10.80.32.1", "255.255.255.0")  # type: ignore[union-attr]
    dhcp = xml.find("ip/dhcp/range")
    assert (dhcp.get("start"), dhcp.get("end")) == ("10.80.32.10", "10.80.32.250")  # type: ignore[union-attr]
