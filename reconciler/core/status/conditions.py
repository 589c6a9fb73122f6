"""Ready / Reconciling / Stalled: the conditions of a run, built in one place. Pure.

Every RunReport carries the three conditions, in that order, as Kubernetes
(and Flux) name them: ``after_plan`` for a run that got as far as a plan,
``stalled`` for one whose input was refused before anything was planned,
``run_failed`` for a cycle that crashed; ``day2`` adds RolloutHalted and
ProbePathSuspect while they hold; ``dns_published`` says how publishing the
proxies' names went, when ``dns`` is configured.
"""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.model.plan import ActionKind, Halt, Plan
from reconciler.model.report import (
    ActionOutcome,
    ActionResult,
    Condition,
    DnsOutcome,
    DnsResult,
    Health,
    HostStatus,
    ProxyStatus,
)

Conditions = tuple[Condition, ...]


def stalled(reason: str, message: str) -> Conditions:
    """Nothing attempted: the input (manifests, source, a guard) was refused."""
    return (
        Condition("Ready", False, reason, message),
        Condition("Reconciling", False, reason, message),
        Condition("Stalled", True, reason, message),
    )


def head_refused(
    conditions: Conditions, message: str, *, reason: str = "SourceRefused"
) -> Conditions:
    """``conditions`` of a run of the last accepted revision, while the source (or a guard,
    with its ``reason``) refuses its head: Stalled says so, and Ready is False for it until
    someone acts."""
    found = []
    for condition in conditions:
        if condition.type == "Stalled" and not condition.status:
            condition = Condition("Stalled", True, reason, message)
        elif condition.type == "Ready" and condition.status:
            condition = Condition("Ready", False, reason, message)
        found.append(condition)
    return tuple(found)


def run_failed(message: str) -> Conditions:
    """The cycle itself failed (a bug, or something no adapter classified)."""
    return (
        Condition("Ready", False, "RunFailed", message),
        Condition("Reconciling", False, "RunFailed", message),
        Condition("Stalled", False, "RunFailed", message),
    )


def after_plan(
    plan: Plan,
    outcomes: Sequence[ActionOutcome],
    proxies: Sequence[ProxyStatus],
    hosts: Sequence[HostStatus],
    *,
    suspended: bool,
) -> Conditions:
    """Ready / Reconciling / Stalled for a run that got as far as a plan.

    Ready is True only when every planned action succeeded, nothing is
    blocked, every host answered and every proxy passed its health check;
    otherwise its reason names the first thing in that list that is wrong.
    Reconciling is True while the fleet is expected to move on its own (a
    retry is due, or changes were applied and are not ready yet). Stalled is
    only ever True for a repo that does not load or that a guard refuses
    (``stalled``: reconciler.engine.guards and the loader).
    """
    failed = sum(1 for o in outcomes if o.result is ActionResult.FAILED)
    skipped = sum(1 for o in outcomes if o.result is ActionResult.SKIPPED)
    blocked = len(plan.of_kind(ActionKind.BLOCKED))
    unreachable = sum(1 for h in hosts if not h.reachable)
    unhealthy = sum(1 for p in proxies if p.health is not Health.HEALTHY)
    issues = [
        ("ActionsFailed", failed, "action(s) failed"),
        ("Interrupted", skipped, "action(s) skipped by a shutdown"),
        ("Suspended", int(suspended), "policy.suspend is on"),
        ("ActionsBlocked", blocked, "action(s) blocked by a safety rule"),
        ("HostsUnreachable", unreachable, "host(s) unreachable"),
        ("ProxiesUnhealthy", unhealthy, "proxy(ies) not healthy"),
    ]
    found = [(reason, f"{count} {text}") for reason, count, text in issues if count]
    if found:
        ready = Condition("Ready", False, found[0][0], "; ".join(text for _, text in found))
    else:
        ready = Condition("Ready", True, "Reconciled", f"{len(proxies)} proxy(ies) healthy")
    applied = sum(1 for o in outcomes if o.result is ActionResult.SUCCEEDED)
    if plan.halts:  # nothing is retried under a halt: a new commit resumes
        reconciling = Condition(
            "Reconciling", False, "RolloutHalted", "no replace of this revision goes any further"
        )
    elif failed or skipped:
        reconciling = Condition(
            "Reconciling", True, "RetryPending", "the next run retries what did not succeed"
        )
    elif applied and not ready.status:
        reconciling = Condition(
            "Reconciling", True, "ChangesApplied", f"{applied} action(s) applied; not ready yet"
        )
    elif applied:
        reconciling = Condition(
            "Reconciling", False, "Converged", f"{applied} action(s) applied; the fleet matches"
        )
    else:
        reconciling = Condition("Reconciling", False, "NoChanges", "nothing was applied")
    stalled = Condition("Stalled", False, "Valid", "the fleet repo loaded")
    return (ready, reconciling, stalled)


def day2(plan: Plan, halts: Sequence[Halt]) -> Conditions:
    """RolloutHalted and ProbePathSuspect, present only while they hold."""
    found = []
    if halts:
        revision = halts[0].revision[:12] or "this revision"
        names = ", ".join(h.proxy for h in halts)
        which = "their" if len(halts) > 1 else "its"
        vms = "; ".join(f"{h.proxy}: {h.reason}" for h in halts)
        found.append(
            Condition(
                "RolloutHalted",
                True,
                "NewVmUnhealthy",
                f"rollout of {revision} halted: {names} failed {which} health check ({vms}); "
                "no further replace of this revision; the old VMs keep serving; a new commit "
                "resumes",
            )
        )
    if plan.suspect_zones:
        zones = ", ".join(plan.suspect_zones)
        found.append(
            Condition(
                "ProbePathSuspect",
                True,
                "HalfAZoneFailing",
                f"at least half of the proxies of zone(s) {zones} fail their probe at once; "
                "none of them is replaced for it",
            )
        )
    return tuple(found)


def dns_published(outcome: DnsOutcome) -> Condition:
    """DnsPublished: True while the server holds every wanted name; False with the server's
    rcode when it was unreachable or refused, or with the names someone else holds.
    Its message stays the same from run to run while nothing changes (no status commit)."""
    if outcome.result is DnsResult.FAILED:
        reason = outcome.reason or "PublishFailed"
        rcode = f"rcode {outcome.rcode}: " if outcome.rcode else ""
        return Condition("DnsPublished", False, reason, rcode + outcome.error)
    if outcome.conflicts:
        names = "; ".join(outcome.conflicts)
        return Condition("DnsPublished", False, "NameConflict", names)
    return Condition("DnsPublished", True, "Published", f"{outcome.records} name(s) owned")
