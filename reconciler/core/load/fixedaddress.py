"""``spec.network``, a proxy's fixed address: read, and checked where a schema cannot.

The schema holds the shape (an address with a prefix length, IP-looking gateway and
nameservers); here each is parsed and held to the others:

- the address is a host address of its own network (not the network's or, for IPv4
  networks wider than /31, the broadcast address);
- the gateway is of the same family, inside that network, and not the address itself;
- no two proxies hold one address (a ProxySet with ``network`` would give every
  member the same one: said once, at the set);
- ``cloudInit.networkConfig`` is not set beside it (the fixed address renders the
  network-config; two would contradict each other).

Checked on the lenient reading, so a proxy whose schema failed elsewhere is still
held to these.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from reconciler.core.load.yamlload import Document, FieldPath, format_path
from reconciler.errors import Problem
from reconciler.model.fleet import FixedAddress

if TYPE_CHECKING:  # reading builds its models with ``read``: a cycle only for the types
    from reconciler.core.load.reading import ProxyReading

NETWORK: FieldPath = ("spec", "network")
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Interface = ipaddress.IPv4Interface | ipaddress.IPv6Interface


def read(value: object) -> FixedAddress | None:
    """``spec.network`` read leniently: None without a string address; a gateway or a
    nameserver of the wrong type is left out (the schema check said why)."""
    if not isinstance(value, dict) or not isinstance(value.get("address"), str):
        return None
    gateway = value.get("gateway")
    servers = value.get("nameservers")
    return FixedAddress(
        address=value["address"],
        gateway=gateway if isinstance(gateway, str) else None,
        nameservers=tuple(s for s in servers if isinstance(s, str))
        if isinstance(servers, list)
        else (),
    )


def check(proxies: Iterable[ProxyReading]) -> Iterator[Problem]:
    """Every proxy's fixed address on its own, then no address held twice."""
    holders: dict[IPAddress, ProxyReading] = {}
    sets_said: set[str] = set()
    ordered = sorted(proxies, key=lambda p: (p.document.file, p.document.start.line, p.name or ""))
    for proxy in ordered:
        network = proxy.network
        if network is None or proxy.template_only:
            continue
        if proxy.network_config is not None:
            cloud = proxy.document.value_mark(("spec", "cloudInit", "networkConfig"))
            message = (
                f"exclusive with spec.cloudInit.networkConfig (at {proxy.document.file}:"
                f"{cloud.line}:{cloud.column}): spec.network renders the network-config; "
                "set one of them"
            )
            yield _at(proxy.document, NETWORK, message)
        interface, found = _parsed(proxy.document, network)
        yield from found
        if interface is None:
            continue
        if proxy.set_name is not None:
            if proxy.set_name not in sets_said:
                sets_said.add(proxy.set_name)
                message = (
                    f"every member of ProxySet '{proxy.set_name}' would hold {interface.ip}: "
                    "a fixed address belongs to one Proxy; declare each as a Proxy of its own"
                )
                yield _at(proxy.document, (*NETWORK, "address"), message)
            continue
        first = holders.setdefault(interface.ip, proxy)
        if first is not proxy:
            mark = first.document.value_mark((*NETWORK, "address"))
            message = (
                f"{interface.ip} is already the fixed address of proxy '{first.name}' "
                f"(at {first.document.file}:{mark.line}:{mark.column}); an address exists once"
            )
            yield _at(proxy.document, (*NETWORK, "address"), message)


def _parsed(document: Document, network: FixedAddress) -> tuple[Interface | None, list[Problem]]:
    """The address as an interface (None when it does not parse), and what is wrong."""
    path: FieldPath = (*NETWORK, "address")
    try:
        interface = ipaddress.ip_interface(network.address)
    except ValueError as exc:
        return None, [_at(document, path, f"not an address with its prefix length: {exc}")]
    problems: list[Problem] = []
    net = interface.network
    if net.num_addresses > 2 and interface.ip in (net.network_address, net.broadcast_address):
        what = "network" if interface.ip == net.network_address else "broadcast"
        message = f"{interface.ip} is the {what} address of {net}, not a host's"
        problems.append(_at(document, path, message))
    if network.gateway is not None:
        problems.extend(_gateway(document, interface, network.gateway))
    for index, server in enumerate(network.nameservers):
        if _address(server) is None:
            message = f"{server!r} is not an IP address"
            problems.append(_at(document, (*NETWORK, "nameservers", index), message))
    return interface, problems


def _gateway(document: Document, interface: Interface, gateway: str) -> Iterator[Problem]:
    path: FieldPath = (*NETWORK, "gateway")
    address = _address(gateway)
    if address is None:
        yield _at(document, path, f"{gateway!r} is not an IP address")
    elif address.version != interface.version:
        message = f"{address} is IPv{address.version}, the address is IPv{interface.version}"
        yield _at(document, path, message)
    elif address not in interface.network:
        message = f"{address} is outside {interface.network}, the network of the address"
        yield _at(document, path, message)
    elif address == interface.ip:
        yield _at(document, path, f"{address} is the proxy's own address")


def _address(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _at(document: Document, path: FieldPath, message: str) -> Problem:
    mark = document.value_mark(path)
    return Problem(document.file, mark.line, mark.column, format_path(path), message)
