"""A running guest's IPv4 addresses, as libvirt reports them (agent, DHCP leases, ARP),
and from the host's own ARP table when libvirt's reader fails (``neighbours``).

The lease comes before ARP: libvirt answers it from its own network's status file as soon
as its dnsmasq gave the address, before the guest has said anything else to the host, and
it names the address given to this very MAC; an ARP entry needs traffic and is read through
a fallback on newer kernels. For an interface on a bridge libvirt has no lease and answers
nothing (one RPC, no error), so a bridged guest without an agent still ends in ARP."""

from __future__ import annotations

import ipaddress
import logging
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

import libvirt

from reconciler.adapters.hypervisor.observe.neighbours import ARP_TABLE, arp_entries, arp_ipv4
from reconciler.adapters.hypervisor.transport.libvirtrpc import LibvirtSession
from reconciler.errors import PermanentError, TransientError

log = logging.getLogger("reconciler.host")

AGENT_CODES = frozenset({libvirt.VIR_ERR_AGENT_UNRESPONSIVE, libvirt.VIR_ERR_AGENT_UNSYNCED})
"""Transient for the agent, not for the host: the next address source is asked."""
ADDRESS_SOURCES = (
    ("agent", libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT),
    ("lease", libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE),
    ("arp", libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_ARP),
)


def domain_addresses(session: LibvirtSession, dom: Any, domain: str) -> tuple[str, ...]:
    """Guest agent first, then DHCP leases, then ARP: the first source with an IPv4 wins."""
    if not session.call("virDomainIsActive", lambda _c: dom.isActive(), domain=domain):
        return ()
    for source, flag in ADDRESS_SOURCES:
        try:
            found = session.call(
                "virDomainInterfaceAddresses",
                _interface_addresses(dom, flag),
                domain=domain,
                source=source,
            )
        except (PermanentError, TransientError) as exc:
            if isinstance(exc, TransientError) and exc.code not in AGENT_CODES:
                raise
            log.debug(
                "host %s: %s addresses of %s unavailable: %s",
                session.host.name,
                source,
                domain,
                exc,
            )
            if source == "arp" and isinstance(exc, PermanentError):
                ips = host_arp(session, dom, domain)
                if ips:
                    return ips
            continue
        ips = usable_ipv4(found)
        session.trace("virDomainInterfaceAddresses", "addresses", ", ".join(ips), domain=domain)
        if ips:
            log.debug(
                "host %s: address of %s from the %s source: %s",
                session.host.name,
                domain,
                source,
                ", ".join(ips),
            )
            return ips
    return ()


def host_arp(session: LibvirtSession, dom: Any, domain: str) -> tuple[str, ...]:
    """The domain's IPv4 from the host's /proc/net/arp, for when libvirt's own ARP
    reader fails (reconciler.adapters.hypervisor.observe.neighbours). Says at debug why
    it found none: the table unread, or what the table holds for the domain's MACs."""
    host = session.host.name
    xml = session.call("virDomainGetXMLDesc", lambda _c: dom.XMLDesc(0), domain=domain)
    macs = interface_macs(xml)
    if not macs:
        log.debug("host %s: %s has no interface MAC to look up in the ARP table", host, domain)
        return ()
    table = session.read_host_file(ARP_TABLE)
    if table is None:
        log.debug("host %s: its ARP table %s could not be read for %s", host, ARP_TABLE, domain)
        return ()
    ips = arp_ipv4(table, macs)
    if ips:
        log.debug(
            "host %s: address of %s from the host's ARP table: %s", host, domain, ", ".join(ips)
        )
    else:
        log.debug(
            "host %s: the host's ARP table has no complete entry for %s (MAC %s): %s",
            host,
            domain,
            ", ".join(macs),
            " | ".join(arp_entries(table, macs)) or "no entry at all",
        )
    return ips


def interface_macs(xml: str) -> tuple[str, ...]:
    """The MAC addresses of a domain's interfaces, from its XML."""
    macs = ET.fromstring(xml).findall("./devices/interface/mac")
    return tuple(mac.get("address", "") for mac in macs if mac.get("address"))


def _interface_addresses(dom: Any, source: int) -> Callable[[Any], dict[str, Any]]:
    def call(_conn: Any) -> dict[str, Any]:
        found: dict[str, Any] = dom.interfaceAddresses(source, 0) or {}
        return found

    return call


def usable_ipv4(found: dict[str, Any]) -> tuple[str, ...]:
    """IPv4 addresses of non-loopback interfaces; loopback and link-local dropped."""
    ips: list[str] = []
    for ifname, info in sorted(found.items()):
        if ifname == "lo":
            continue
        for entry in info.get("addrs") or ():
            if entry.get("type") != libvirt.VIR_IP_ADDR_TYPE_IPV4:
                continue
            try:
                ip = ipaddress.IPv4Address(entry.get("addr", ""))
            except ValueError:
                continue
            if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast:
                continue
            if str(ip) not in ips:
                ips.append(str(ip))
    return tuple(ips)
