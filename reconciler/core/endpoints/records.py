"""The DNS names a fleet implies, after a run: a pure function over what the run found.

Names, relative to the configured zone (docs/clients.md):

- ``<proxy>``: the proxy's own name, A/AAAA of the VM that speaks for it. It
  moves only to a VM that passed its health check: while a replace is in
  progress (the new VM is not healthy yet) or the proxy is not healthy, it
  keeps the address published before, the old VM that still serves;
- ``<set>.set``: one per ProxySet, and ``<zone>.zone``: one per placement zone,
  round-robin of the addresses of their **healthy** members only (Kubernetes
  Endpoints' ready addresses). An unhealthy proxy leaves them at the next run.
  A proxy whose health is not known (its host did not answer) keeps the place it
  had: not seen is not failed, and a management box cut off from its hosts must
  not empty every shared name at once.

A name with no address is not wanted (the publisher deletes it under ``sync``).
Beside each name a TXT record names the owning fleet (``registry_text``), as
external-dns's TXT registry does: a name without it is someone else's.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from reconciler.model import Repo
from reconciler.model.report import Health, Member, ProxyStatus

__all__ = ["Endpoint", "Kind", "Member", "members", "record_set", "registry_owner", "registry_text"]

HERITAGE: Final = "heritage=proxyfleet"
SET_LABEL: Final = "set"
ZONE_LABEL: Final = "zone"


class Kind(StrEnum):
    PROXY = "proxy"
    SET = "set"
    ZONE = "zone"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One wanted name: ``name`` relative to the zone, its addresses sorted."""

    name: str
    kind: Kind
    addresses: tuple[str, ...]

    @property
    def ipv4(self) -> tuple[str, ...]:
        return tuple(a for a in self.addresses if ipaddress.ip_address(a).version == 4)

    @property
    def ipv6(self) -> tuple[str, ...]:
        return tuple(a for a in self.addresses if ipaddress.ip_address(a).version == 6)


def registry_text(fleet: str) -> str:
    """The TXT value that marks a name as ``fleet``'s."""
    return f"{HERITAGE},fleet={fleet}"


def registry_owner(texts: Sequence[str]) -> str | None:
    """The fleet a name's TXT values name, None when none is a proxyfleet registry record."""
    for text in texts:
        fields = dict(part.partition("=")[::2] for part in text.split(","))
        if fields.get("heritage") == "proxyfleet" and "fleet" in fields:
            return fields["fleet"]
    return None


def name_of(kind: Kind, key: str) -> str:
    """The relative name of a proxy, a set or a zone. Proxy and set names are DNS labels
    already; a zone id may hold ``_`` and ``.``, which become ``-`` (``eu_west.1`` is
    ``eu-west-1.zone``: a host name may not hold ``_``, and servers refuse it)."""
    if kind is Kind.PROXY:
        return key
    if kind is Kind.SET:
        return f"{key}.{SET_LABEL}"
    label = key.replace("_", "-").replace(".", "-")[:63].strip("-")
    return f"{label}.{ZONE_LABEL}"


def members(repo: Repo, proxies: Sequence[ProxyStatus]) -> tuple[Member, ...]:
    """The repo's proxies with what the run found of them (a proxy the run did not report
    is there, health unknown: it keeps what was published)."""
    found = {p.name: p for p in proxies}
    out = []
    for proxy in repo.proxies:
        status = found.get(proxy.name, ProxyStatus(proxy.name))
        out.append(
            Member(
                proxy=proxy.name,
                zone=proxy.placement.zone,
                proxy_set=proxy.proxy_set,
                address=_normal(status.ip),
                health=status.health,
                host=status.host,
                port=proxy.health.proxy_port,
            )
        )
    return tuple(out)


def record_set(
    proxies: Sequence[Member], *, published: Mapping[str, Sequence[str]]
) -> tuple[Endpoint, ...]:
    """Every wanted name, sorted, each with at least one address.

    ``published``: the addresses of the names this fleet owns on the server now
    (relative name -> addresses), what a proxy that is not healthy keeps.
    """
    wanted: dict[tuple[Kind, str], set[str]] = {}
    for member in proxies:
        own = _own(member, published)
        if own:
            wanted[(Kind.PROXY, member.proxy)] = set(own)
        shared = [(Kind.ZONE, member.zone)]
        if member.proxy_set:
            shared.append((Kind.SET, member.proxy_set))
        for kind, key in shared:
            if not key:
                continue
            addresses = wanted.setdefault((kind, key), set())
            addresses.update(_shared(member, published.get(name_of(kind, key), ()), published))
    endpoints = [
        Endpoint(name_of(kind, key), kind, tuple(sorted(addresses, key=_address_key)))
        for (kind, key), addresses in wanted.items()
        if addresses
    ]
    return tuple(sorted(endpoints, key=lambda e: e.name))


def _own(member: Member, published: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    if member.health is Health.HEALTHY and member.address:
        return (member.address,)
    return tuple(published.get(member.proxy, ()))


def _shared(
    member: Member, shared_now: Sequence[str], published: Mapping[str, Sequence[str]]
) -> tuple[str, ...]:
    """The member's addresses in a shared name: its VM's when healthy; when its health is
    unknown, those it had there already; none when unhealthy."""
    if member.health is Health.HEALTHY and member.address:
        return (member.address,)
    if member.health is Health.UNKNOWN:
        return tuple(a for a in published.get(member.proxy, ()) if a in shared_now)
    return ()


def _normal(text: str) -> str:
    """The address in its canonical text (as a server prints it back); "" if not one."""
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return ""


def _address_key(address: str) -> tuple[int, int]:
    parsed = ipaddress.ip_address(address)
    return (parsed.version, int(parsed))
