"""Which VM speaks for each proxy once a run has acted, before anything is probed.

The one the plan keeps, created, started or (when a replace failed or is
blocked) left in place; a proxy with no action at all is absent, one whose
VM may sit on a host that did not answer is unknown. When the proxy is
moving to a new VM while its old one still runs (a replace made now, or an
old VM whose delete waits for the new one's health), the old VM is named
too: it serves while the new one does not (reconciler.engine.check probes them).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from reconciler.model import Action, ActionKind, Inventory, Plan, Proxy, Repo
from reconciler.model.plan import Keep, blocked_kind, replaced
from reconciler.model.report import ActionOutcome, ActionResult, Health, ProxyState, ProxyStatus


@dataclass(frozen=True, slots=True)
class Target:
    """Which VM speaks for a proxy after the apply step, and what is known of it."""

    status: ProxyStatus
    fresh: bool = False
    """Created or started in this run: its IP may take a while."""
    old: ProxyStatus | None = None
    """The VM the proxy is moving away from, still running: it serves while ``status``'s VM
    is not healthy."""


def targets(
    repo: Repo,
    plan: Plan,
    inventory: Inventory,
    results: Mapping[Action, ActionOutcome],
) -> list[Target]:
    by_proxy: dict[str, list[Action]] = {}
    for action in plan.actions:
        if action.proxy:
            by_proxy.setdefault(action.proxy, []).append(action)
    targets = []
    for name in sorted({p.name for p in repo.proxies} | set(by_proxy)):
        proxy = repo.proxy(name)
        zone = proxy.placement.zone if proxy is not None else ""
        actions = by_proxy.get(name, [])
        target = _target_of(name, actions, inventory, results, present=proxy is not None)
        if target is None:
            continue
        if (
            proxy is not None
            and target.status.state is ProxyState.ABSENT
            and _may_hide(proxy, repo, inventory)
        ):
            # Not seen is not absent: its VM may run on the host that did not answer.
            unknown = replace(target.status, state=ProxyState.UNKNOWN, health=Health.UNKNOWN)
            target = Target(unknown)
        if not target.status.zone:
            host = repo.fleet.host(target.status.host)
            zone = zone or (host.zone if host is not None else "")
            target = replace(target, status=replace(target.status, zone=zone))
        if target.old is not None:
            target = replace(target, old=replace(target.old, zone=target.status.zone))
        targets.append(target)
    return targets


def _may_hide(proxy: Proxy, repo: Repo, inventory: Inventory) -> bool:
    """True when a host that could hold ``proxy``'s VM (its zone's, its pin) was not read."""
    pin = proxy.placement.host
    for host in repo.fleet.hosts:
        if host.zone == proxy.placement.zone or host.name == pin:
            seen = inventory.host(host.name)
            if seen is None or not seen.reachable:
                return True
    return False


def _target_of(
    name: str,
    actions: Sequence[Action],
    inventory: Inventory,
    results: Mapping[Action, ActionOutcome],
    *,
    present: bool,
) -> Target | None:
    if not actions:
        return Target(ProxyStatus(name, state=ProxyState.ABSENT, detail="not in the plan"))
    # The planner lists a proxy's kept VM first; for a manifest that is gone,
    # any VM that is not deleted by now still speaks for it.
    for index, action in enumerate(actions):
        outcome = results.get(action)
        if action.kind is ActionKind.DELETE and (
            outcome is None or outcome.result is ActionResult.SUCCEEDED
        ):
            continue
        target = _after(name, action, outcome, inventory)
        old = _old_vm(name, action, actions[index + 1 :], results, inventory)
        return replace(target, old=old) if old is not None and old != target.status else target
    return Target(ProxyStatus(name, state=ProxyState.ABSENT)) if present else None


def _old_vm(
    name: str,
    action: Action,
    later: Sequence[Action],
    results: Mapping[Action, ActionOutcome],
    inventory: Inventory,
) -> ProxyStatus | None:
    """The running VM a proxy moves away from, left in place: the old VM of the replace
    this run made, or one whose delete the plan holds or that did not go."""
    if not _present_vm(action):
        return None
    candidates: list[tuple[str, str]] = []
    outcome = results.get(action)
    old = replaced(action)
    made = outcome is not None and outcome.result is ActionResult.SUCCEEDED
    if action.kind is ActionKind.REPLACE and old is not None and made:
        candidates.append((old.host, old.domain))
    for other in later:
        done = results.get(other)
        deleting = other.kind is ActionKind.DELETE or blocked_kind(other) is ActionKind.DELETE
        if deleting and (done is None or done.result is not ActionResult.SUCCEEDED):
            candidates.append((other.host or "", other.domain or ""))
    for host, domain in candidates:
        status = _observed(name, host, domain, inventory)
        if status.state is ProxyState.RUNNING:
            return status
    return None


def _present_vm(action: Action) -> bool:
    """True for an action after which the proxy has a VM of the current spec."""
    return action.kind in (ActionKind.KEEP, ActionKind.START, ActionKind.REPLACE)


def _after(
    name: str, action: Action, outcome: ActionOutcome | None, inventory: Inventory
) -> Target:
    """The VM that speaks for proxy ``name`` once ``action`` went as ``outcome`` says."""
    host, domain, kind = action.host or "", action.domain or "", action.kind
    ok = outcome is not None and outcome.result is ActionResult.SUCCEEDED
    failure = f"{kind.value}: {outcome.error}" if outcome is not None and not ok else ""
    if ok and kind in (ActionKind.CREATE, ActionKind.REPLACE, ActionKind.START):
        # A start says why (crashed, killed, and which restart): the run's status would
        # otherwise show a running VM and hide that it went down.
        why = action.reason if kind is ActionKind.START else ""
        return Target(
            ProxyStatus(name, host, domain, state=ProxyState.RUNNING, detail=why), fresh=True
        )
    if kind is ActionKind.CREATE:
        failed = outcome is not None and outcome.result is ActionResult.FAILED
        return Target(
            ProxyStatus(
                name,
                host,
                domain,
                ProxyState.FAILED if failed else ProxyState.ABSENT,
                detail=failure,
            )
        )
    old = replaced(action)
    if kind is ActionKind.REPLACE and old is not None:
        serving = _observed(name, old.host, old.domain, inventory)
        return Target(replace(serving, detail=failure))  # the old VM stays when a replace fails
    if kind is ActionKind.BLOCKED and (old is not None or not domain):
        blocked = f"blocked: {action.reason}"
        # A blocked replace (a later batch, a halt; its domain is the new VM's name, never
        # made): the old VM still serves.
        if old is not None:
            serving = _observed(name, old.host, old.domain, inventory)
            return Target(replace(serving, detail=blocked))
        return Target(ProxyStatus(name, host, state=ProxyState.ABSENT, detail=blocked))
    status = _observed(name, host, domain, inventory)
    if failure:
        status = replace(status, detail=failure)
    elif kind in (ActionKind.BLOCKED, ActionKind.ABANDON):
        status = replace(status, detail=f"{kind.value}: {action.reason}")
    elif isinstance(action, Keep) and not action.up_to_date:
        status = replace(status, detail=action.reason)  # why a VM that is not right stays
    return Target(status)


def _observed(name: str, host: str, domain: str, inventory: Inventory) -> ProxyStatus:
    found = inventory.host(host)
    if found is None or not found.reachable:
        return ProxyStatus(
            name, host, domain, state=ProxyState.UNKNOWN, detail=f"host {host} unreachable"
        )
    seen = next((d.state for d in found.domains if d.name == domain), None)
    state = ProxyState.ABSENT if seen is None else ProxyState.of(seen)
    return ProxyStatus(name, host, domain, state=state)
