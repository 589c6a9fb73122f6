"""What a run hands on to the next one: the VMs' failure history and a halted rollout.

``for_plan`` turns what was kept into the planner's ``History`` for one
revision (halts of another revision are ignored: a new commit resumes the
rollout); ``after_run`` folds the run's plan, outcomes and health checks into it (pure:
the engine keeps the result through its ``HistoryStore``; case files in
``tests/history_cases/``):

- a successful start counts as a restart of that VM (the last 20 are kept), and the VM
  is starting again: its probe is judged once it has passed a check since; a resume of a
  paused VM (an I/O pause, a full pool) is neither: its guest never stopped;
- a running proxy whose check failed is failing since the first such check,
  one that passed is failing no more, has been healthy once and is healthy since
  the first check it passed without a break; a proxy whose
  health is unknown (host unreachable, not checked) changes nothing, except a
  new VM that runs without an address yet: it has not passed, and its failing
  time starts (the planner's deadline needs one check of this box);
- a failing proxy of a zone whose probe path the plan found suspect records that run
  (``suspect_at``): its replace clock restarts from the last such run;
- the halts are the plan's: every replace whose new VM passed no health check by its
  deadline, the earlier ones of the revision included (the planner found them);
- records of VMs that no longer exist on a host that answered are dropped;
  those on hosts that did not answer are kept (their VMs are unknown, not gone).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from datetime import datetime

from reconciler.model.history import Halt, History, VmRecord
from reconciler.model.inventory import DomainState, Inventory
from reconciler.model.plan import DomainRef, Start
from reconciler.model.report import ActionOutcome, ActionResult, Health, ProxyState, ProxyStatus

KEPT_RESTARTS = 20


def for_plan(kept: History, *, now: datetime, revision: str) -> History:
    halts = tuple(h for h in kept.halts if h.revision == revision)
    return History(now=now, vms=kept.vms, halts=halts, revision=revision)


def after_run(
    kept: History,
    *,
    inventory: Inventory,
    halts: Sequence[Halt],
    outcomes: Sequence[ActionOutcome],
    proxies: Sequence[ProxyStatus],
    now: datetime,
    suspect_zones: Collection[str] = (),
) -> History:
    records: dict[DomainRef, VmRecord] = dict(kept.vms)
    paused = {
        DomainRef(h.name, d.name)
        for h in inventory.hosts
        for d in h.domains
        if d.state is DomainState.PAUSED
    }
    for outcome in outcomes:
        action = outcome.action
        if isinstance(action, Start) and outcome.result is ActionResult.SUCCEEDED:
            ref = DomainRef(action.host or "", action.domain or "")
            if ref in paused:
                continue  # a resume (after an I/O pause): the guest never stopped
            record = records.get(ref, VmRecord())
            restarts = (*record.restarts, now)[-KEPT_RESTARTS:]
            # Started again, it is starting again: its boot is not a failing probe.
            records[ref] = dataclasses.replace(
                record,
                restarts=restarts,
                failing_since=None,
                healthy_once=False,
                healthy_since=None,
            )
    for proxy in proxies:
        if not proxy.host or not proxy.domain:
            continue
        ref = DomainRef(proxy.host, proxy.domain)
        record = records.get(ref, VmRecord())
        if proxy.health is Health.UNKNOWN and (
            record.healthy_once or proxy.state is not ProxyState.RUNNING
        ):
            continue
        if proxy.health is Health.HEALTHY:
            since = record.healthy_since or now
            record = dataclasses.replace(
                record, failing_since=None, healthy_once=True, healthy_since=since, suspect_at=None
            )
        elif proxy.state is ProxyState.RUNNING and record.failing_since is None:
            record = dataclasses.replace(record, failing_since=now, healthy_since=None)
        else:
            record = dataclasses.replace(record, healthy_since=None)
        if proxy.health is Health.UNHEALTHY and proxy.zone in suspect_zones:
            record = dataclasses.replace(record, suspect_at=now)
        records[ref] = record
    live = {DomainRef(p.host, p.domain) for p in proxies if p.host and p.domain}
    records = _alive(records, inventory, live)
    return History(vms=tuple(sorted(records.items(), key=_key)), halts=tuple(halts))


def with_since(proxies: Sequence[ProxyStatus], kept: History) -> tuple[ProxyStatus, ...]:
    """``proxies`` with ``since`` from the record ``after_run`` kept for their VM: healthy
    since, or failing since; None (left to the status's own fold) when it records neither."""
    out = []
    for proxy in proxies:
        record = kept.record(proxy.host, proxy.domain) if proxy.domain else None
        since = None
        if record is not None and proxy.health is Health.HEALTHY:
            since = record.healthy_since
        elif record is not None and proxy.health is Health.UNHEALTHY:
            since = record.failing_since
        out.append(dataclasses.replace(proxy, since=since) if since is not None else proxy)
    return tuple(out)


def _alive(
    records: dict[DomainRef, VmRecord], inventory: Inventory, live: set[DomainRef]
) -> dict[DomainRef, VmRecord]:
    """The records of VMs that still exist: listed by a host that answered, spoken for by a
    proxy this run, or on a host that did not answer (unknown, not gone)."""
    answered = {h.name: {d.name for d in h.domains} for h in inventory.hosts if h.reachable}
    return {
        ref: record
        for ref, record in records.items()
        if ref in live or ref.host not in answered or ref.domain in answered[ref.host]
    }


def _key(item: tuple[DomainRef, VmRecord]) -> tuple[str, str]:
    return (item[0].host, item[0].domain)
