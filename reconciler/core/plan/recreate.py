"""Recreate: a proxy with a fixed address is replaced destroy-then-create.

Pure. An address cannot exist twice, so the create-before-destroy of every other
replace (rollout) would start the new VM beside the old one with the same address.
A proxy with ``spec.network`` gets the ``Recreate`` strategy instead, as a
StatefulSet's pods get an ordered replace for an identity that cannot exist twice:

- whatever asks for a new VM (a changed spec, an image update, ``restartedAt``, a
  heal) plans the *delete* of its VMs first (``Delete.recreate``), and nothing else;
- a later plan sees the proxy without a VM and creates it (a plain create), so the
  old VM is gone before the new one is defined: never two VMs with one address;
- a VM of it that appears beside the one kept (a duplicate, a leftover stale VM)
  goes at once, without waiting for the kept one's health;
- recreates are paced per zone by ``maxUnavailable`` (at least 1): a zone's fixed
  proxies that are down (no VM, or a new VM that has not passed a health check)
  take its places, so the next recreate of the zone starts only once the one
  before it serves again. ``maxSurge`` does not apply: there is nothing to surge.

While the rollout of the revision is halted, recreates are blocked like replaces.
Nothing waits inside a run: each plan reads from what was observed (and the
history) whether the recreate before it is done (reconciler.core.plan.handover).
"""

from __future__ import annotations

import ipaddress
from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence

from reconciler.core.plan.handover import handover, preference
from reconciler.core.plan.vms import OwnedVm, delete
from reconciler.model.fleet import Proxy, Rollout
from reconciler.model.history import History
from reconciler.model.limits import Limits
from reconciler.model.plan import Action, Delete, block


def first_half(proxy: Proxy, vms: Sequence[OwnedVm], *, why: str) -> list[Action]:
    """The deletes that start a recreate of ``proxy``: every VM in ``vms`` (``why`` says
    what asked for a new one); blocked when the proxy is protected."""
    assert proxy.network is not None
    address = ipaddress.ip_interface(proxy.network.address).ip
    reason = (
        f"{why}: recreate, as {proxy.name} holds the fixed address {address}: "
        "this VM goes first, a later run creates its successor"
    )
    protect = proxy.lifecycle.protect
    ordered = sorted(vms, key=lambda v: (v.name, v.host))
    return [delete(vm, reason, protect=protect, recreate=True) for vm in ordered]


def is_down(
    proxy: Proxy,
    current: Sequence[OwnedVm],
    stale: Sequence[OwnedVm],
    *,
    history: History,
    limits: Limits,
) -> bool:
    """Whether fixed-address ``proxy`` serves nobody now: it has no VM at all, or the VM
    it keeps has not passed a health check since it was made (or fails again)."""
    if not current:
        return not stale
    keeper = min(current, key=lambda vm: preference(vm, history))
    return not handover(keeper, proxy=proxy.name, history=history, limits=limits).ready


def pace_recreates(
    actions: Sequence[Action],
    *,
    rollout: Rollout,
    zone_of: Mapping[str, str],
    zone_sizes: Mapping[str, int],
    down: Mapping[str, Collection[str]],
    halted: Sequence[str],
) -> list[Action]:
    """``actions`` with the recreates each zone's ``maxUnavailable`` allows left to go and
    the others blocked; every recreate blocked while ``halted`` names any. ``down``: each
    zone's fixed-address proxies not serving. Those go first (a heal: recreating them
    takes nothing more away), then by proxy name."""
    proxies: dict[str, list[str]] = defaultdict(list)  # zone -> proxies with a recreate
    for action in actions:
        if isinstance(action, Delete) and action.recreate and action.proxy:
            zone = zone_of.get(action.proxy, "")
            if action.proxy not in proxies[zone]:
                proxies[zone].append(action.proxy)
    waiting: dict[str, str] = {}  # proxy -> why its recreate waits
    for zone, names in proxies.items():
        size = zone_sizes.get(zone, 1)
        allowed = max(1, rollout.max_unavailable.of(size, round_up=False))
        serving_none = set(down.get(zone, ()))
        others = len(serving_none - set(names))  # down, and not being recreated now
        places = allowed - others
        ordered = sorted(names, key=lambda n: (n not in serving_none, n))
        for index, name in enumerate(ordered):
            if halted:
                waiting[name] = f"rollout halted: {', '.join(halted)} failed a health check"
            elif index >= places:
                busy = others + max(places, 0)
                waiting[name] = (
                    f"recreate waits: zone {zone} already has {busy} of its {size} proxies "
                    f"down or being recreated (maxUnavailable {rollout.max_unavailable} "
                    f"allows {allowed})"
                )
    return [
        block(a, f"{a.reason}; {waiting[a.proxy]}")
        if isinstance(a, Delete) and a.recreate and a.proxy in waiting
        else a
        for a in actions
    ]
