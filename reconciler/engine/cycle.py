"""The daemon's cycle, in one function that reads top to bottom.

sync -> load once (the engine's read limits and secrets) -> claim the fleet ->
the engine: guards -> observe -> plan (with the delete budget) -> act -> fold
history -> report. ``source_cycle`` builds it from the source, the engine and
the fleet's leadership; ``Daemon`` runs it on every trigger.

A source that cannot give a revision makes a Stalled report naming why; a
failed fetch reconciles the last good revision and lists the fetch error. A
refused head (not a fast-forward, or ``verifyCommits``) keeps the fleet alive:
the cycle reconciles the last revision it accepted, and the report names the
refused one (``RunReport.refused``, Stalled/SourceRefused); only with nothing
accepted yet in this process is it a Stalled report that touches no host.
A head the engine's guards refuse as a revision (``REVISION_REFUSALS``: a host
removed while it holds VMs) keeps the fleet alive the same way: the last repo
this process loaded and the engine accepted is reconciled again, and the report
is Stalled with the guard's reason, its problems first. Nothing is deleted for
the refused revision; the hosts it dropped stay reconciled until the head changes.
A head accepted although it does not descend from the last revision
(``repo.allowNonFastForward``) is logged as a warning naming both revisions and
the deletes its plan made (``rollback_warning``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from reconciler.core.status.conditions import head_refused, stalled
from reconciler.engine.leadership import Leadership
from reconciler.engine.runtime import utc_now
from reconciler.errors import InvalidInput, SourceError
from reconciler.model import ActionKind, Repo
from reconciler.model.checkout import Checkout
from reconciler.model.report import RunReport, RunResult
from reconciler.ports.source import Source

log = logging.getLogger(__name__)

Cycle = Callable[[threading.Event], RunReport | None]
"""One reconcile, given the stop flag; never raises (a bug becomes a FAILED report).
None: this daemon stands by (another one leads the fleet) and did nothing."""

Load = Callable[[Path], Repo]
"""The repo at a directory, loaded with the engine's read limits and secrets; raises
InvalidInput (``Engine.load``)."""

FleetOf = Callable[[Path], str | None]
"""The fleet id of the repo at a directory, None when it does not load (``fleet_id``
over the composition root's loader)."""

Reconcile = Callable[..., RunReport]
"""The engine: ``(root, revision)``, and with a ``load`` given to the cycle, ``loaded=`` the
repo (or the InvalidInput) the cycle loaded (``Engine.reconcile_once``)."""


def source_cycle(
    source: Source,
    reconcile: Reconcile,
    *,
    clock: Callable[[], datetime] = utc_now,
    leadership: Leadership | None = None,
    fleet: str | None = None,
    load: Load | None = None,
    fleet_of: FleetOf | None = None,
) -> Cycle:
    """The cycle the daemon runs (the module docstring says what it does).

    With ``leadership``, the fleet's lock is claimed between the load and the
    engine: without it the cycle returns None and no host is touched; a repo
    that does not load claims the lock of the fleet id last seen (its Stalled
    report touches no host either way). ``fleet``: the lock to claim whatever
    the repo says (one of several fleets, each pinned by the config; a repo
    naming another fleet is Stalled by the engine's guard). ``load``: the
    engine's load; the repo is then read once per cycle and handed to the
    engine (without it, the engine loads it, and the lock's name costs a load
    of its own: ``fleet_of``'s). With ``leadership``, one of ``fleet``, ``load`` and
    ``fleet_of`` names the lock; none of them is a ValueError.
    """
    if leadership is not None and fleet is None and load is None and fleet_of is None:
        raise ValueError("a cycle with leadership needs fleet, load or fleet_of to name its lock")
    accepted: list[Checkout] = []  # the last checkout the source gave, in this process
    good: list[tuple[str, Repo]] = []  # the last revision the engine accepted, as loaded

    def cycle(stop: threading.Event) -> RunReport | None:
        started = clock()
        # 1. Sync: the head, or (refused) the last accepted revision, or nothing.
        refusal: SourceError | None = None
        try:
            checkout = source.sync()
            accepted[:] = [checkout]
        except SourceError as exc:
            if not exc.revision or not accepted:
                reason = "SourceRefused" if exc.revision else "SourceUnavailable"
                return source_stalled(
                    str(exc),
                    revision=exc.revision,
                    started=started,
                    reason=reason,
                    finished=clock(),
                )
            refusal, checkout = exc, accepted[0]
            log.warning("%s; reconciling the last accepted revision %s.", exc, checkout.revision)
        # 2. Load once, with the engine's limits (a broken repo goes on to its Stalled report).
        loaded: Repo | InvalidInput | None = None
        if load is not None:
            try:
                loaded = load(checkout.root)
            except InvalidInput as exc:
                loaded = exc
        # 3. Claim the fleet: its id is the lock's name.
        if leadership is not None:
            claimed = fleet or _fleet_name(checkout.root, loaded, fleet_of) or leadership.fleet
            if claimed is not None and not leadership.claim(claimed):
                return None
        # 4. Guards, observe, plan, act, fold history, report: the engine.
        if load is not None:
            report = reconcile(checkout.root, checkout.revision, loaded=loaded)
        else:
            report = reconcile(checkout.root, checkout.revision)
        # 4b. A revision the guards refuse: the last accepted one is reconciled instead.
        refused = refusal_reason(report)
        if refused is not None and good and good[0][0] != checkout.revision:
            report = again(reconcile, checkout.root, good[0], report, refused)
        elif refused is None and isinstance(loaded, Repo) and report.plan is not None:
            good[:] = [(checkout.revision, loaded)]
        # 5. What the source said belongs to the report too (and the fetch to its duration).
        report = replace(report, started=min(started, report.started))
        if checkout.fetch_error:
            report = replace(report, problems=(checkout.fetch_error, *report.problems))
        if checkout.rolled_back_from:
            log.warning("%s", rollback_warning(checkout, report))
        if refusal is not None:
            message = f"{refusal}; the last accepted revision {checkout.revision[:12]} is applied"
            report = replace(
                report,
                refused=refusal.revision,
                problems=(str(refusal), *report.problems),
                conditions=head_refused(report.conditions, message),
            )
        return report

    return cycle


REVISION_REFUSALS = frozenset({"HostRemovedWithVms"})
"""Stalled reasons of the engine's guards that refuse a revision while the fleet it
accepted before can still be reconciled."""


def refusal_reason(report: RunReport) -> str | None:
    """The report's Stalled reason when it is one of ``REVISION_REFUSALS``."""
    for condition in report.conditions:
        if condition.type == "Stalled" and condition.status:
            return condition.reason if condition.reason in REVISION_REFUSALS else None
    return None


def again(
    reconcile: Reconcile, root: Path, good: tuple[str, Repo], refused: RunReport, reason: str
) -> RunReport:
    """A run of the last accepted revision ``good`` (revision, repo as loaded), reported
    as Stalled for the ``refused`` one with its ``reason`` and problems first."""
    revision, repo = good
    message = "; ".join(refused.problems)
    log.warning(
        "Revision %s refused (%s); reconciling the last accepted revision %s.",
        refused.revision[:12],
        reason,
        revision[:12],
    )
    report = reconcile(root, revision, loaded=repo)
    return replace(
        report,
        refused=refused.revision,
        problems=(*refused.problems, *report.problems),
        conditions=head_refused(
            report.conditions,
            f"{message}; the last accepted revision {revision[:12]} is applied",
            reason=reason,
        ),
    )


NAMED_DELETES = 10
"""Deletes a rollback's warning names; the rest are counted."""


def rollback_warning(checkout: Checkout, report: RunReport) -> str:
    """The warning for a head accepted by ``repo.allowNonFastForward`` that does not descend
    from the revision before it: both revisions, and the deletes its plan made (count, and
    the first ``NAMED_DELETES`` VMs by proxy)."""
    head = (
        f"Rollback accepted (repo.allowNonFastForward): {checkout.revision[:12]} does not "
        f"descend from the last revision {checkout.rolled_back_from[:12]}"
    )
    if report.plan is None:
        return f"{head}; it was not planned ({report.result.value} run)."
    deletes = [a for a in report.plan.actions if a.kind is ActionKind.DELETE]
    if not deletes:
        return f"{head}; its plan deletes no VM."
    names = [f"{a.proxy or '-'} ({a.domain} on {a.host})" for a in deletes[:NAMED_DELETES]]
    more = len(deletes) - len(names)
    listed = ", ".join(names) + (f" and {more} more" if more else "")
    return f"{head}; its plan deletes {len(deletes)} VM(s): {listed}."


def _fleet_name(
    root: Path, loaded: Repo | InvalidInput | None, fleet_of: FleetOf | None
) -> str | None:
    """The fleet id of the repo the cycle loaded; asked of ``fleet_of`` only when the cycle
    did not load it (None: the repo does not load, and is never acted on, so needs no lock)."""
    if isinstance(loaded, Repo):
        return loaded.fleet.name
    return fleet_of(root) if loaded is None and fleet_of is not None else None


def source_stalled(
    message: str, *, revision: str, started: datetime, finished: datetime, reason: str
) -> RunReport:
    return RunReport(
        started=started,
        finished=finished,
        result=RunResult.STALLED,
        revision=revision,
        problems=(message,),
        conditions=stalled(reason, message),
    )
