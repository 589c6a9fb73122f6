"""``apply``'s follow-up runs: a run acts and returns (it never waits for a boot), so a
replace takes two runs at least (create the new VM; once a check of it passed, delete
the old one) and a rollout one per batch. ``apply`` goes on as the daemon does: while
the last run changed something or left a new VM that is not healthy yet, it runs again
after ``FOLLOW_UP_SECONDS`` (``HANDOVER_SECONDS`` when its check found a replace's new
VM healthy for the first time beside its old VM: the handover needs no wait), on the same
revision, under the same lock, until a run finds nothing to do, makes no progress, or
``limit`` seconds have passed.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path

from reconciler.engine.reconcile import Engine
from reconciler.model import ActionKind
from reconciler.model.report import ActionResult, RunReport, RunResult

FOLLOW_UP_SECONDS = 10.0
"""Seconds between ``apply``'s runs while the fleet is still moving."""
HANDOVER_SECONDS = 1.0
"""Seconds to the run that hands over (``RunReport.handover``), as the daemon's HANDOVER."""
NEXT_STEP = (ActionKind.REPLACE, ActionKind.DELETE)
"""What a later run may follow: a replace's delete of its old VM, a rollout's next batch."""


def in_flight(report: RunReport) -> str:
    """Why another run is due after ``report`` ("" when none is): a new VM it knows of is
    not healthy yet, or it replaced or deleted a VM (the replace's second step, or the
    next batch of a rollout, may follow). Creates and starts alone call for none: the
    run checked them, and a new VM that did not pass is "not healthy yet"."""
    if report.result is RunResult.STALLED or report.plan is None:
        return ""
    if report.settling:
        return f"{len(report.settling)} new VM(s) not healthy yet ({', '.join(report.settling)})"
    acted = [
        o
        for o in report.outcomes
        if o.result is ActionResult.SUCCEEDED and o.action.kind in NEXT_STEP
    ]
    if acted:
        return f"{len(acted)} replace(s) or delete(s) made; the next step may follow"
    return ""


def follow_up(
    engine: Engine,
    root: Path,
    first: RunReport,
    *,
    revision: str,
    limit: float,
    say: Callable[[str], None] | None = None,
    wait: float = FOLLOW_UP_SECONDS,
) -> RunReport:
    """The last run's report after the follow-up runs ``first`` calls for, with the
    outcomes of every run (``first``'s included) in order. A stop request (SIGINT,
    SIGTERM) ends it between runs."""
    say = say or _stderr
    outcomes = list(first.outcomes)
    report = first
    deadline = engine.runtime.monotonic() + limit
    runs = 1
    while why := in_flight(report):
        pause = min(wait, HANDOVER_SECONDS) if report.handover else wait
        if engine.runtime.monotonic() + pause > deadline:
            say(
                f"Still moving after {runs} run(s) ({why}); stopping here after {limit:.0f} s: "
                "the daemon, or another apply, carries on from what is observed."
            )
            break
        say(f"{why}; follow-up run in {pause:.0f} s.")
        engine.runtime.sleep(pause)  # stop.wait in production: SIGINT/SIGTERM cut it short
        if engine.runtime.stop.is_set():
            break
        prepared = engine.prepare(root, revision=revision)
        if isinstance(prepared, RunReport):
            report = prepared
            break
        runs += 1
        counts = {kind: n for kind, n in prepared.plan.summary().items() if n}
        say(f"follow-up run {runs} plans " + ", ".join(f"{n} {k}" for k, n in counts.items()))
        report = engine.finish(prepared)
        outcomes.extend(report.outcomes)
    # The plan shown and confirmed stays the report's; the outcomes are every run's, the
    # proxies, hosts and conditions the last run's.
    return dataclasses.replace(report, plan=first.plan, outcomes=tuple(outcomes))


def _stderr(line: str) -> None:
    print(f"proxyfleet apply: {line}", file=sys.stderr, flush=True)
