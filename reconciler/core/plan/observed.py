"""What the inventory says about this fleet, sorted for the planner: its VMs per proxy and per
(host, domain), the names taken on each host, the volumes, the other fleets seen."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field

from reconciler.core.plan.vms import OwnedVm
from reconciler.model import Inventory
from reconciler.model.plan import Abandon, Action


@dataclass
class Observed:
    """Filled by ``observe``; the planner then counts its own creates into ``load``."""

    owned: dict[str, list[OwnedVm]] = field(default_factory=lambda: defaultdict(list))
    """proxy -> its VMs on reachable hosts of fleet.yaml."""
    vms: dict[tuple[str, str], OwnedVm] = field(default_factory=dict)
    """(host, domain) -> owned VM in fleet.yaml."""
    taken: dict[str, dict[str, bool]] = field(default_factory=lambda: defaultdict(dict))
    """host -> domain name -> foreign?"""
    load: Counter[str] = field(default_factory=Counter)
    """Owned VMs (and, once the planner adds them, creates planned so far) per host."""
    abandoned: list[Action] = field(default_factory=list)
    volumes: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Reachable host in fleet.yaml -> its pool's volumes."""
    fleets: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    """host -> other fleets' ids seen there."""


def observe(inventory: Inventory, *, fleet: str, hosts: Collection[str]) -> Observed:
    """This fleet's VMs, the names taken and the volumes on each reachable host of ``hosts``
    (fleet.yaml's); this fleet's VMs on hosts no longer in fleet.yaml are abandoned."""
    seen = Observed()
    for host in sorted(inventory.hosts, key=lambda h: h.name):
        if not host.reachable:
            continue  # its VMs are unknown, never absent
        for domain in sorted(host.domains, key=lambda d: d.name):
            owner = domain.owner
            vm = None
            if owner is not None and owner.fleet == fleet:
                vm = OwnedVm(owner.proxy, host.name, domain.name, domain.state, owner, domain)
            if host.name not in hosts:
                if vm is not None:
                    reason = f"host {host.name} is no longer in fleet.yaml; left alone"
                    seen.abandoned.append(vm.action(Abandon, reason))
                continue
            seen.taken[host.name][domain.name] = vm is None
            if owner is not None and owner.fleet != fleet:
                seen.fleets[host.name].add(owner.fleet)
            if vm is not None:
                seen.owned[vm.proxy].append(vm)
                seen.vms[(host.name, domain.name)] = vm
                seen.load[host.name] += 1
        if host.name in hosts:
            seen.volumes[host.name] = host.volumes
    return seen
