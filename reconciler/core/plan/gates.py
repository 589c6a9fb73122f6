"""The delete gates: what may go without a manifest, an empty desired set, maxDeletesPerRun."""

from __future__ import annotations

from collections.abc import Iterable

from reconciler.core.plan.vms import OwnedVm
from reconciler.model.fleet import Policy
from reconciler.model.limits import Limits
from reconciler.model.plan import Action, Delete, block

PROTECTED = "protected (lifecycle.protect)"
PRUNE_OFF = "its manifest is gone but prune is off"
EMPTY = "the desired set is empty and allowEmpty is false"


def orphan(vm: OwnedVm, policy: Policy) -> Action:
    action = vm.action(Delete, f"no manifest for proxy {vm.proxy}")
    if vm.protect:
        return block(action, PROTECTED)
    if not policy.prune:
        return block(action, PRUNE_OFF)
    return action


def gate_deletes(
    proposed: Iterable[Action], *, has_proxies: bool, policy: Policy, limits: Limits
) -> list[Action]:
    """An empty desired set, then the delete budget: which deletes may go, by host and domain.

    The budget is ``maxDeletesPerRun``, or less when the box's delete window
    (``limits.deletes_left``, the deletes of the last ``deleteWindowSeconds``
    counted in the state dir) allows fewer: the one place that holds either.

    Only deletes count: a replace deletes nothing in its run (its old VM goes
    in a later run, by a delete that counts then). Creates and starts never count.
    """
    actions = list(proposed)
    if not has_proxies and not policy.allow_empty:
        return [block(a, EMPTY) if isinstance(a, Delete) else a for a in actions]
    victims = sorted(v for a in actions if (v := _victim(a)) is not None)
    budget = max(policy.max_deletes_per_run, 0)
    limit = f"beyond maxDeletesPerRun ({policy.max_deletes_per_run})"
    if limits.deletes_left is not None and limits.deletes_left < budget:
        budget = max(limits.deletes_left, 0)
        limit = limits.deletes_why or f"beyond the {budget} delete(s) the delete window allows"
    allowed = set(victims[:budget])
    return [
        block(a, limit) if (v := _victim(a)) is not None and v not in allowed else a
        for a in actions
    ]


def _victim(action: Action) -> tuple[str, str] | None:
    """The (host, domain) an action deletes."""
    if isinstance(action, Delete) and action.host and action.domain:
        return (action.host, action.domain)
    return None
