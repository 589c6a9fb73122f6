"""The delete gates: what may go without a manifest, an empty desired set, maxDeletesPerRun,
and how far one revision may shrink the fleet (maxShrinkPercent)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from reconciler.core.plan.vms import PROTECTED, OwnedVm
from reconciler.model import Inventory, Repo
from reconciler.model.fleet import Policy
from reconciler.model.limits import Limits
from reconciler.model.plan import Action, Delete, block

__all__ = ["PROTECTED", "Shrink", "gate_deletes", "orphan", "shrink"]
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


@dataclass(frozen=True, slots=True, kw_only=True)
class Shrink:
    """A revision's net loss of proxies over ``maxShrinkPercent`` of those the hosts run."""

    lost: int
    owned: int
    desired: int
    acknowledged: bool
    """``acknowledgeShrinkTo`` equals ``desired``: the shrink is meant."""

    def problem(self, repo: Repo) -> str:
        """The Stalled problem of an unacknowledged shrink, pinned to maxShrinkPercent."""
        where, policy = repo.fleet.location, repo.fleet.policy
        percent = self.lost * 100 // self.owned
        return (
            f"{where.file}:{where.line}:{where.column}: spec.policy.maxShrinkPercent: this "
            f"revision drops {self.lost} of the {self.owned} proxies the hosts run "
            f"({percent}% > {policy.max_shrink_percent}%); if that is meant, set "
            f"spec.policy.acknowledgeShrinkTo: {self.desired}"
        )


def shrink(repo: Repo, inventory: Inventory) -> Shrink | None:
    """The shrink when the repo's net loss is more than ``maxShrinkPercent`` of the owned
    proxies; None when it is within it.

    The baseline is what the hosts run for this fleet (reachable hosts only,
    protected VMs left out), so it needs no state and survives restarts and a
    lost state dir. Without ``prune`` nothing is deleted and nothing is checked.
    """
    policy = repo.fleet.policy
    if not policy.prune:
        return None  # nothing is deleted without prune: the shrink costs no VM
    # Protected VMs are never deleted, so they count on neither side.
    owned = {
        domain.owner.proxy
        for host in inventory.hosts
        if host.reachable
        for domain in host.domains
        if domain.owner is not None
        and domain.owner.fleet == repo.fleet.name
        and not domain.owner.protect
    }
    desired = {proxy.name for proxy in repo.proxies}
    # Net loss: a renamed proxy (one dropped, one added) does not shrink the fleet.
    lost = len(owned - desired) - len(desired - owned)
    if not owned or lost * 100 <= policy.max_shrink_percent * len(owned):
        return None
    acknowledged = policy.acknowledge_shrink_to == len(desired)
    return Shrink(lost=lost, owned=len(owned), desired=len(desired), acknowledged=acknowledged)
