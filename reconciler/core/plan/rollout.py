"""Rollouts: every replace, whatever caused it, in paced, health-gated batches per zone.

Pure. ``pace`` numbers the replaces of a plan into batches per zone
(``policy.rollout``: at most ``maxSurge`` + ``maxUnavailable`` replaces of a
zone at once, at least 1) and lets only the first batch go: the others are
blocked, and a later plan starts them once the replaces before them are done.
A zone's proxies that are still finishing an earlier replace (an old VM of
theirs stays after this plan: its delete waits for the new VM's health) take
the first batch's places (the planner counts them, ``in_flight``), so places
free up one by one: the plan that deletes a finished replace's old VM starts
the zone's next replace. Nothing waits inside a run for that: each plan reads
it from what was observed and the history (reconciler.core.plan.handover).

While the rollout of this revision is halted (a new VM passed no health check
by its deadline) every replace is blocked, until a new commit (a fix or a
revert) arrives. Replaces are create-before-destroy, so they never take a
serving VM away before its successor is healthy.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence

from reconciler.core.plan.recreate import pace_recreates
from reconciler.model.fleet import Rollout
from reconciler.model.plan import Action, Replace, block


def pace(
    actions: Sequence[Action],
    *,
    rollout: Rollout,
    zone_of: Mapping[str, str],
    zone_sizes: Mapping[str, int],
    in_flight: Mapping[str, int],
    down: Mapping[str, Collection[str]],
    halted: Sequence[str],
) -> list[Action]:
    """``actions`` with the Replaces of each zone's first batch left to go and the later ones
    blocked (heals go first, then by proxy name); every Replace blocked while ``halted``
    (the proxies whose new VM failed) names any. Recreates (``down``: a zone's
    fixed-address proxies not serving) are paced by reconciler.core.plan.recreate."""
    actions = pace_recreates(
        actions,
        rollout=rollout,
        zone_of=zone_of,
        zone_sizes=zone_sizes,
        down=down,
        halted=halted,
    )
    if halted:
        names = ", ".join(halted)
        which = "their" if len(halted) > 1 else "its"
        why = f"rollout halted: {names} failed {which} health check"
        return [block(a, why) if isinstance(a, Replace) else a for a in actions]
    by_zone: dict[str, list[Replace]] = defaultdict(list)
    for action in actions:
        if isinstance(action, Replace):
            by_zone[zone_of.get(action.proxy or "", "")].append(action)
    batches: dict[int, int] = {}
    for zone, replaces in by_zone.items():
        size = rollout.batch_size(zone_sizes.get(zone, 1))
        busy = min(in_flight.get(zone, 0), size)
        ordered = sorted(replaces, key=lambda r: (not r.heal, r.proxy or ""))
        for index, replace in enumerate(ordered):
            batches[id(replace)] = (busy + index) // size + 1
    result: list[Action] = []
    for action in actions:
        if isinstance(action, Replace):
            batch = batches[id(action)]
            if batch > 1:
                zone = zone_of.get(action.proxy or "", "")
                waits = f"batch {batch} of zone {zone}: waits until the replaces before it are done"
                action = block(action, f"{action.reason}; {waits}")
        result.append(action)
    return result
