"""Rollouts: every replace, whatever caused it, in paced, health-gated batches per zone.

Pure. ``pace`` numbers the replaces of a plan into batches per zone
(``policy.rollout``: at most ``maxSurge`` + ``maxUnavailable`` replaces of a
zone at once, at least 1), or blocks them all while the rollout of this
revision is halted. The executor starts batch n+1 only once every new VM of
batch n is healthy, and no further batch once one is not; the engine then
records the halt, and the next plan of the same revision blocks every
replace until a new commit (a fix or a revert) arrives.

Replaces are create-before-destroy, so they never take a serving VM away
before its successor is healthy; a zone's proxies that are still finishing an
earlier replace (their old VM waits for the new one's health) take batch
places first.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence

from reconciler.model.fleet import Rollout
from reconciler.model.plan import Action, Blocked, Replace


def pace(
    actions: Sequence[Action],
    *,
    rollout: Rollout,
    zone_of: Mapping[str, str],
    zone_sizes: Mapping[str, int],
    in_flight: Mapping[str, int],
    halted: str,
) -> list[Action]:
    """``actions`` with every Replace numbered into its zone's batches, or blocked with
    ``halted`` (the reason) when that is not ""; heals go first, then by proxy name."""
    if halted:
        return [_halt(a, halted) if isinstance(a, Replace) else a for a in actions]
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
            zone = zone_of.get(action.proxy or "", "")
            note = f"; batch {batch} of zone {zone}" if batch > 1 else ""
            action = _with_batch(action, batch, note)
        result.append(action)
    return result


def _with_batch(action: Replace, batch: int, note: str) -> Replace:
    return Replace(
        reason=action.reason + note,
        proxy=action.proxy,
        host=action.host,
        domain=action.domain,
        digest=action.digest,
        vm=action.vm,
        replaces=action.replaces,
        batch=batch,
        heal=action.heal,
    )


def _halt(action: Replace, reason: str) -> Blocked:
    return Blocked(
        reason=f"rollout halted: {reason}",
        proxy=action.proxy,
        host=action.host,
        domain=action.domain,
        digest=action.digest,
        blocks=action.kind,
        replaces=action.replaces,
    )
