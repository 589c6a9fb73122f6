"""Which proxies a run leaves settling: a new VM not healthy yet, or a first pass that lets
the next plan hand over. Pure.

``RunReport.settling`` names them: a daemon runs again soon (engine/daemon.FOLLOW_UP)
instead of waiting its interval, and ``apply`` follows up likewise (cli/followups.py).
``RunReport.handover`` names those of the second kind alone: their next run comes at
once (engine/daemon.HANDOVER), since there is nothing to wait for.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from reconciler.model import ActionKind, Inventory
from reconciler.model.history import History
from reconciler.model.report import ActionOutcome, ActionResult, Health, ProxyState, ProxyStatus

NEW_VM_ACTIONS = (ActionKind.CREATE, ActionKind.REPLACE, ActionKind.START)


def handover(
    vms: Sequence[ProxyStatus], *, inventory: Inventory, fleet: str, history: History
) -> tuple[str, ...]:
    """The proxies whose VM passed its first check in this run (it is healthy now, and the
    history from before the run has no pass of it) while another VM of the proxy still
    exists: the next plan hands over. ``inventory`` is what the run observed before it
    acted, ``history`` what earlier runs handed on to it."""
    owned = _owned(inventory, fleet)
    return tuple(
        sorted(
            {
                vm.name
                for vm in vms
                if vm.health is Health.HEALTHY
                and not history.record(vm.host, vm.domain).healthy_once
                and owned.get(vm.name, set()) - {(vm.host, vm.domain)}
            }
        )
    )


def settling(
    outcomes: Sequence[ActionOutcome],
    vms: Sequence[ProxyStatus],
    *,
    inventory: Inventory,
    fleet: str,
    history: History,
    now: datetime,
    window: float,
    handing: Sequence[str],
) -> tuple[str, ...]:
    """The proxies whose VM runs, is not healthy yet and is new: this run created, replaced
    or started it, or its recorded creation time is less than ``window`` seconds before
    ``now`` (a VM that a run before a restart made and that is still booting). And
    ``handing`` (``handover``'s answer for the same run): the next plan hands over
    (deletes the old VM, starts the zone's next replace). ``inventory`` is what the
    run observed before it acted, ``history`` what earlier runs handed on to it.

    A VM that stays unhealthy longer than that is no longer "new": it waits for
    the interval like any other problem. So does a young VM that passed a check in an
    earlier run and is not healthy now (or its address is not known for a while): it is
    no longer booting, and follow-ups every few seconds would not make it pass sooner.
    """
    acted = {
        (o.action.host, o.action.domain)
        for o in outcomes
        if o.result is ActionResult.SUCCEEDED and o.action.kind in NEW_VM_ACTIONS
    }
    created = {
        (h.name, d.name): d.owner.created
        for h in inventory.hosts
        for d in h.domains
        if d.owner is not None and d.owner.fleet == fleet
    }
    names = set(handing)
    for vm in vms:
        key = (vm.host, vm.domain)
        passed = history.record(vm.host, vm.domain).healthy_once
        young = not passed and _younger(created.get(key, ""), now, window)
        booting = vm.health is not Health.HEALTHY and vm.state is ProxyState.RUNNING
        if booting and (key in acted or young):
            names.add(vm.name)
    return tuple(sorted(names))


def _owned(inventory: Inventory, fleet: str) -> dict[str, set[tuple[str, str]]]:
    """Each proxy of ``fleet`` -> its VMs on the hosts, as (host, domain)."""
    owned: dict[str, set[tuple[str, str]]] = {}
    for h in inventory.hosts:
        for d in h.domains:
            if d.owner is not None and d.owner.fleet == fleet:
                owned.setdefault(d.owner.proxy, set()).add((h.name, d.name))
    return owned


def _younger(recorded: str, now: datetime, window: float) -> bool:
    """True when the ISO time ``recorded`` lies within ``window`` seconds before ``now``."""
    try:
        when = datetime.fromisoformat(recorded)
    except ValueError:
        return False
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return 0 <= (now - when).total_seconds() < window
