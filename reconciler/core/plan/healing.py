"""Self-healing: what becomes of a proxy's kept VM that is down, edited or failing.

Pure, like the planner that calls it: the VM as observed, the proxy's
manifest and what earlier runs saw (``History``) in, a ``Verdict`` out. The
rules (docs/planning.md, "Day 2"):

- down through a failure (crashed, killed, panicked): started again under
  ``drift: correct``, unless it was already started ``health.maxRestarts``
  times within ``health.restartWindowSeconds``: then it is replaced. Under
  ``detect`` it is reported.
- running with other vCPUs or memory than its machine type (edited by hand):
  replaced under ``correct``, reported under ``detect``.
- running, but its probe failed without a break for
  ``health.replaceAfterSeconds`` (0: never) after it had once been healthy:
  replaced under ``correct``, unless the probe path is suspect in its zone
  (at least half of the zone's proxies fail at once), which holds it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from reconciler.model.fleet import DriftMode, MachineType, Proxy
from reconciler.model.history import History
from reconciler.model.inventory import Domain, DomainState


class Cure(StrEnum):
    KEEP = "keep"
    START = "start"
    REPLACE = "replace"
    HOLD = "hold"
    """A replace that the probe-path guard stops (planned as a blocked replace)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    cure: Cure
    reason: str


def judge(
    domain: Domain,
    *,
    host: str,
    proxy: Proxy,
    machine_type: MachineType,
    drift: DriftMode,
    history: History,
    suspect: str,
) -> Verdict | None:
    """The day-2 verdict for ``proxy``'s kept VM ``domain`` on ``host``; None when no day-2
    rule applies (the planner's power-state rules decide). ``suspect`` is why the probe
    path of the proxy's zone is suspect ("" when it is not)."""
    correct = drift is DriftMode.CORRECT
    if domain.failed:
        return _down(domain, host=host, proxy=proxy, correct=correct, history=history)
    if domain.state is not DomainState.RUNNING:
        return None
    edits = hand_edits(domain, machine_type)
    if edits:
        what = f"edited by hand ({edits})"
        if correct:
            return Verdict(Cure.REPLACE, f"{what}; drift: correct replaces it")
        return Verdict(Cure.KEEP, f"{what}; drift: detect only reports it")
    after = proxy.health.replace_after_seconds
    failing = history.failing_for(host, domain.name)
    if after <= 0 or failing is None or failing < after:
        return None
    # The time it started failing, not the seconds since: a reason that changes on every run
    # would make every run's status meaningfully new (a status commit per run while it lasts).
    since = history.record(host, domain.name).failing_since
    stamp = since.strftime("%Y-%m-%dT%H:%M:%SZ") if since is not None else "?"
    what = f"its probe has failed since {stamp}, longer than replaceAfterSeconds ({after:.0f} s)"
    if not correct:
        return Verdict(Cure.KEEP, f"{what}; drift: detect only reports it")
    if suspect:
        return Verdict(Cure.HOLD, f"{what}, but {suspect}")
    held = history.record(host, domain.name).suspect_at
    if held is not None and history.now is not None:
        left = after - (history.now - held).total_seconds()
        if left > 0:
            stamp = held.strftime("%Y-%m-%dT%H:%M:%SZ")
            return Verdict(
                Cure.HOLD,
                f"{what}, but its zone's probe path was suspect until {stamp}: "
                f"replaced if it still fails {after:.0f} s after that",
            )
    return Verdict(Cure.REPLACE, f"{what}; replaced")


def _down(domain: Domain, *, host: str, proxy: Proxy, correct: bool, history: History) -> Verdict:
    how = domain.reason or domain.state.value
    state = "crashed" if domain.state is DomainState.CRASHED else "shut off"
    what = f"{state} ({how})"
    if not correct:
        return Verdict(Cure.KEEP, f"{what}; drift: detect only reports it")
    limit = proxy.health.max_restarts
    window = proxy.health.restart_window_seconds
    restarts = 0
    if history.now is not None:
        since = history.now - timedelta(seconds=window)
        restarts = history.record(host, domain.name).restarts_since(since)
    if restarts >= limit:
        return Verdict(
            Cure.REPLACE,
            f"{what} again after {restarts} restart(s) within {window:.0f} s "
            f"(maxRestarts {limit}); replaced",
        )
    return Verdict(Cure.START, f"{what}; drift: correct starts it (restart {restarts + 1})")


def hand_edits(domain: Domain, machine_type: MachineType) -> str:
    """What differs from the machine type, e.g. "vcpus 1 -> 2"; "" when nothing (or unread)."""
    found = []
    if domain.vcpus is not None and domain.vcpus != machine_type.vcpus:
        found.append(f"vcpus {machine_type.vcpus} -> {domain.vcpus}")
    if domain.memory_mib is not None and domain.memory_mib != machine_type.memory_mib:
        found.append(f"memory {machine_type.memory_mib} -> {domain.memory_mib} MiB")
    return ", ".join(found)


def suspect_zones(
    kept: Callable[[], dict[str, list[tuple[str, str] | None]]], history: History
) -> dict[str, str]:
    """Zone -> why its probe path is suspect, for zones where at least half of the proxies
    (at least 2) fail their probe at once. ``kept()`` maps each zone to its proxies' kept
    running VMs as (host, domain), None for a proxy without one; it is not called when
    fewer than 2 VMs fail in all (no zone can be suspect), as on an idle fleet, where
    finding every proxy's kept VM up front was a tenth of the plan."""
    suspect: dict[str, str] = {}
    if history.failing_count() < 2:
        return suspect
    for zone, vms in sorted(kept().items()):
        failing = sum(1 for vm in vms if vm is not None and history.failing_for(*vm) is not None)
        if failing >= 2 and 2 * failing >= len(vms):
            suspect[zone] = (
                f"{failing} of {len(vms)} proxies of zone {zone} fail their probe at once: "
                "the probe path is suspect, nothing is replaced for it"
            )
    return suspect
