"""Placement: which hosts a new VM of a proxy may go to, and which one it goes to.

The candidates are its pin or its zone's hosts; a host counts when it takes
new VMs (not cordoned or draining: ``drain``), is reachable, under
``maxProxies`` and has room for the machine type (``capacity.Room``); the VM
being replaced keeps its host when that host qualifies, else the least loaded
one wins, by name on ties.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping

from reconciler.core.plan.capacity import Room
from reconciler.core.plan.drain import closed
from reconciler.core.plan.vms import Made
from reconciler.model import Host, Proxy


class Placement:
    """Hosts by name and zone as fleet.yaml lists them, with the load and room this plan sees.

    ``load`` and ``room`` are the planner's own: creates it plans count in both."""

    def __init__(
        self,
        hosts: dict[str, Host],
        zones: Mapping[str, list[str]],
        *,
        reachable: Collection[str],
        load: Counter[str],
        room: Room,
    ) -> None:
        self.hosts, self.zones, self.reachable = hosts, zones, reachable
        self.load, self.room = load, room

    def unreachable_for(self, proxy: Proxy) -> str | None:
        """The first unreachable host where a VM of ``proxy`` could be: its zone's, or its pin."""
        where = set(self.zones.get(proxy.placement.zone, ()))
        if proxy.placement.host in self.hosts:
            where.add(proxy.placement.host)
        return next((h for h in sorted(where) if h not in self.reachable), None)

    def targets(self, proxy: Proxy) -> list[str]:
        """The hosts of fleet.yaml a new VM of ``proxy`` may go to: its pin, or its zone."""
        pin = proxy.placement.host
        if pin is not None:
            return [pin] if pin in self.hosts else []
        return self.zones.get(proxy.placement.zone, [])

    def place(self, proxy: Proxy, made: Made, *, prefer: str | None) -> tuple[str | None, str]:
        """The host a new VM goes to (and why), or None and the reason there is none."""
        zone, pin = proxy.placement.zone, proxy.placement.host
        candidates = self.targets(proxy)
        if not candidates:
            if pin is not None:
                return None, f"pinned host {pin} is not in fleet.yaml"
            return None, f"zone {zone} has no hosts in fleet.yaml"
        shut = closed(candidates, self.hosts)
        if pin is not None and shut:
            return None, f"pinned host {shut}: it takes no new VM"
        if not any(self.hosts[h].schedulable for h in candidates):
            return None, f"zone {zone} has no host that takes new VMs: {shut}"
        placed, why = self._place(proxy, made, candidates, prefer=prefer)
        if placed is None and shut:
            return None, f"{why}; {shut}"
        return placed, why

    def _place(
        self, proxy: Proxy, made: Made, candidates: list[str], *, prefer: str | None
    ) -> tuple[str | None, str]:
        """``place`` among ``candidates``, of which at least one takes new VMs."""
        zone, pin = proxy.placement.zone, proxy.placement.host
        counted = [
            h
            for h in candidates
            if self.hosts[h].schedulable and h in self.reachable and self._has_room(h)
        ]
        short = {
            h: self.room.shortfall(self.hosts[h], made.machine_type, made.image) for h in counted
        }
        free = [h for h in counted if not short[h]]
        if prefer in free:
            return prefer, f"on {prefer}, beside the VM it replaces"
        if not free and short:
            where = f"pinned host {pin}" if pin is not None else f"zone {zone}"
            return None, f"{where} has no host with room: " + "; ".join(short.values())
        if not free:
            if pin is not None:
                return None, f"pinned host {pin} is full (maxProxies {self._max(pin)})"
            return None, f"zone {zone} has no host with free capacity (maxProxies)"
        best = min(free, key=lambda h: (self.load[h], h))
        if pin is not None:
            return best, f"on pinned host {best}"
        return best, f"on {best}, the least loaded host of zone {zone} ({self.load[best]} VMs)"

    def _max(self, host: str) -> int | None:
        return self.hosts[host].max_proxies

    def _has_room(self, host: str) -> bool:
        limit = self._max(host)
        return limit is None or self.load[host] < limit
