"""A guest's IPv4 from the host's own ARP table, when libvirt cannot read it.

libvirt's ARP address source (``virDomainInterfaceAddresses`` with
``VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_ARP``) dumps the kernel's neighbour table
over rtnetlink. Kernels since about 6.10 put the dump's closing ``NLMSG_DONE``
(20 bytes) into the same read as the last neighbours; libvirt's
``virArpTableGet`` (9.0 here, unchanged in later releases) checks every message
against the length of a neighbour message before it looks at the type, and so
answers ``internal error: wrong nlmsg len`` for every domain on such a host.
Seen on the lab (kernel 6.18, libvirt 9.0): a raw RTM_GETNEIGH dump there returns
the neighbours and a (type 3, length 20) message in one ``recv``. It is libvirt
meeting a newer kernel, not the lab's set-up.

Then the host's ``/proc/net/arp`` (the same table, as text) is read over the SSH
link proxyfleet already holds, and matched against the MAC addresses of the
domain's interfaces. Only complete entries (``ATF_COM``) count.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator

ARP_TABLE = "/proc/net/arp"
ATF_COM = 0x2
"""Flag of a complete entry (the neighbour answered)."""
LIBVIRT_ARP_BUG = "wrong nlmsg len"


def _rows(table: str, macs: Iterable[str]) -> Iterator[list[str]]:
    """The fields of each row of ``table`` (``/proc/net/arp``) whose MAC is one of ``macs``."""
    wanted = {mac.lower() for mac in macs}
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 6 and fields[3].lower() in wanted:
            yield fields


def arp_ipv4(table: str, macs: Iterable[str]) -> tuple[str, ...]:
    """The usable IPv4 addresses ``table`` (``/proc/net/arp``) gives for ``macs``."""
    ips: list[str] = []
    for address, _hw_type, flags, *_rest in _rows(table, macs):
        try:
            complete = int(flags, 16) & ATF_COM
            ip = ipaddress.IPv4Address(address)
        except ValueError:
            continue
        if not complete:
            continue
        if ip.is_loopback or ip.is_link_local or ip.is_unspecified or ip.is_multicast:
            continue
        if str(ip) not in ips:
            ips.append(str(ip))
    return tuple(ips)


def arp_entries(table: str, macs: Iterable[str]) -> tuple[str, ...]:
    """The rows of ``table`` for ``macs``, spaces squeezed: what a log says of them."""
    return tuple(" ".join(fields) for fields in _rows(table, macs))
