"""``proxyfleet apply [FILE]``: one reconcile, now, from a checkout on this machine.

Loads the repo, checks the checkout is not behind the revision the fleet last
applied (the daemon's status branch says which: a checkout behind it would
plan the deletes of everything added since; ``--allow-older`` goes on anyway),
takes the fleet's lock (once the hosts are dialling; before
anything is observed: ``ApplyLock``), observes the live hosts, shows the
plan, asks (unless ``--yes``), applies it, checks every proxy, and, as a run
never waits for a boot, runs again on the same revision while the fleet is
still moving (a replace's second step, a rollout's next batch:
``reconciler.cli.followups``; not with ``--no-wait``), then prints the
result. The lock is the one a running daemon holds (docs/operations.md): next
to a daemon that leads the fleet, apply refuses and names the holder; with
``--lock-timeout`` it waits that long for the lock to be free (the daemon stopped).

With FILE (``proxyfleet plan -out FILE``), it applies that plan without asking:
the repo (the plan's, unless --repo), the hosts and the plan computed now must
be what they were, or it refuses, says what changed, and applies nothing
(reconciler.cli.savedplan).

Exit codes:
  0  every planned action succeeded and every proxy passed its health check
  1  nothing applied: invalid repo or config, a checkout behind the fleet's
     revision, a refused or declined confirmation, a saved plan that no longer
     holds, or the run itself broke
  3  applied, but an action failed or was skipped, or a proxy is not healthy
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reconciler.cli import compose, exitcodes, savedplan
from reconciler.cli.applyengine import Started, bars_wanted, with_engine
from reconciler.cli.applylock import add_lock_timeout_argument
from reconciler.cli.common import (
    add_age_identity_argument,
    add_host_access_arguments,
    add_repo_argument,
    table,
)
from reconciler.cli.fleetcheck import add_allow_older_argument, not_behind
from reconciler.cli.followups import follow_up
from reconciler.cli.gitrevision import start_revision
from reconciler.cli.plan import plan_json, render_plan
from reconciler.cli.progress import progress_bars
from reconciler.core.status import statusdoc
from reconciler.engine.reconcile import Engine, Prepared
from reconciler.errors import ConfigError
from reconciler.model import Repo
from reconciler.model.checkout import Standing
from reconciler.model.plan import MUTATING
from reconciler.model.report import ActionResult, Health, RunReport

__all__ = ["apply_with", "exit_code", "register", "run"]

EXIT_OK = exitcodes.OK
EXIT_ERROR = exitcodes.ERROR
EXIT_DEGRADED = exitcodes.DEGRADED


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "apply",
        help="one reconcile, now: plan against the live hosts, confirm, apply, check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "plan",
        nargs="?",
        type=Path,
        metavar="FILE",
        help="a plan saved by `proxyfleet plan -out FILE`: apply exactly it, without asking",
    )
    add_repo_argument(parser)
    parser.set_defaults(repo=None)  # with FILE, the saved plan names the repo
    add_host_access_arguments(parser, state_dir=True)
    add_age_identity_argument(parser)
    parser.add_argument("--yes", action="store_true", help="apply without asking")
    parser.add_argument(
        "--json", action="store_true", help="print the result as JSON (needs --yes)"
    )
    add_lock_timeout_argument(parser)
    add_allow_older_argument(parser)
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help=(
            "one run only: do not wait for new VMs to get an IP, check every proxy once and "
            "return (a replace's old VM is deleted by a later run or the daemon)"
        ),
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.json and not args.yes and args.plan is None:
        print("proxyfleet apply: --json needs --yes (there is no one to ask)", file=sys.stderr)
        return EXIT_ERROR
    saved = None
    if args.plan is not None:
        try:
            saved = savedplan.read(args.plan)
        except ConfigError as exc:
            print(f"proxyfleet apply: {exc}; nothing was applied.", file=sys.stderr)
            return EXIT_ERROR
    args.repo = args.repo or (saved.repo if saved is not None else Path("."))

    def body(started: Started) -> int:
        one = started.settings
        standing = compose.fleet_standing(args.repo, one) if one is not None else None
        return apply_with(
            args,
            started.engine,
            gate=started.gate,
            revision=started.revision,
            loaded=started.loaded,
            saved=saved,
            standing=standing,
        )

    return with_engine(args, args.repo, body, locked=True)


def apply_with(
    args: argparse.Namespace,
    engine: Engine,
    *,
    gate: Callable[[], None] | None = None,
    revision: Callable[[], str] | None = None,
    loaded: Repo | None = None,
    saved: savedplan.SavedPlan | None = None,
    standing: Callable[[], Standing] | None = None,
) -> int:
    """The command once its engine exists (tests pass one over fake hosts). ``gate``: the
    fleet lock (``ApplyLock.take``), taken before the hosts are observed. ``revision``:
    the answer of a ``start_revision`` started earlier; asked now when None. ``loaded``:
    the repo as ``run`` loaded it with the engine's limits and secrets (``Engine.prepare``).
    ``saved``: the plan read from ``args.plan``, applied only if it still holds.
    ``standing``: where the checkout stands beside the fleet's revision; None: not asked."""
    root: Path = args.repo
    if standing is not None and not not_behind(standing(), allow_older=args.allow_older):
        return EXIT_ERROR
    prepared = engine.prepare(
        root, revision=(revision or start_revision(root))(), gate=gate, loaded=loaded
    )
    if isinstance(prepared, RunReport):
        return _stalled(prepared, as_json=args.json)
    if saved is not None:
        listing = plan_json(prepared.plan)
        stale = savedplan.changes(saved, prepared, listing=listing, path=args.plan, root=root)
        if stale:
            return _refuse_stale(args.plan, stale)
    changes = prepared.plan.has_changes
    if not args.json:
        print(render_plan(prepared.plan, color=_use_color()))
    reviewed = saved is not None or args.yes
    if changes and not reviewed and not _confirmed(prepared):
        return EXIT_ERROR
    with progress_bars(bars_wanted(args)):
        report = engine.finish(prepared)
        if not getattr(args, "no_wait", False):  # a replace's second step is a later run
            limit = 3 * engine.settings.replace_timeout
            report = follow_up(engine, root, report, revision=prepared.revision, limit=limit)
    if args.json:
        print(json.dumps(report_json(report), indent=2))
    else:
        print()
        print(render_report(report))
    return exit_code(report)


def _use_color() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def _refuse_stale(path: Path, stale: list[str]) -> int:
    print(
        f"proxyfleet apply: the plan saved in {path} no longer holds; nothing was applied:",
        file=sys.stderr,
    )
    for change in stale:
        print(f"  - {change}", file=sys.stderr)
    print(f"Plan again (proxyfleet plan -out {path}) and review it.", file=sys.stderr)
    return EXIT_ERROR


def _confirmed(prepared: Prepared) -> bool:
    if not sys.stdin.isatty():
        print(
            "proxyfleet apply: stdin is not a terminal, so nobody can confirm; "
            "pass --yes to apply without asking. Nothing was applied.",
            file=sys.stderr,
        )
        return False
    count = sum(1 for a in prepared.plan.actions if a.kind in MUTATING)
    print(f"\nApply these {count} change(s) to the hosts? Only 'yes' is accepted.")
    try:
        answer = input("  Enter a value: ").strip()
    except EOFError:
        answer = ""
    if answer != "yes":
        print("Apply cancelled; nothing was applied.", file=sys.stderr)
        return False
    return True


def exit_code(report: RunReport) -> int:
    """As ``reconcile`` reads the daemon's run (``exitcodes.for_run``): 0 applied and Ready;
    1 stalled or broken; 3 applied as far as it went but not Ready (an action failed, a host
    unreachable, a proxy unhealthy, something blocked)."""
    ready = any(c.type == "Ready" and c.status for c in report.conditions)
    return exitcodes.for_run(report.result.value, ready=ready)


def render_report(report: RunReport) -> str:
    """What was done and where every proxy stands, for people."""
    lines = []
    for outcome in report.outcomes:
        action = outcome.action
        what = f"{action.kind.value} {action.domain or action.proxy} on {action.host}"
        if outcome.result is ActionResult.SUCCEEDED:
            tries = f" after {outcome.attempts} attempts" if outcome.attempts > 1 else ""
            lines.append(f"  ok      {what} ({outcome.duration_seconds:.1f} s{tries})")
        else:
            lines.append(f"  {outcome.result.value:<7} {what}: {outcome.error}")
    rows = [
        (
            p.name,
            p.host or "-",
            p.domain or "-",
            p.state.value,
            p.ip or "-",
            p.health.value,
            p.detail,
        )
        for p in report.proxies
    ]
    headers = ("PROXY", "HOST", "DOMAIN", "STATE", "IP", "HEALTH", "DETAIL")
    counts = {r: sum(1 for o in report.outcomes if o.result is r) for r in ActionResult}
    healthy = sum(1 for p in report.proxies if p.health is Health.HEALTHY)
    summary = (
        f"Apply {report.result.value}: {counts[ActionResult.SUCCEEDED]} succeeded, "
        f"{counts[ActionResult.FAILED]} failed, {counts[ActionResult.SKIPPED]} skipped; "
        f"{healthy}/{len(report.proxies)} proxies healthy."
    )
    unreachable = [f"{h.name} ({h.error})" for h in report.hosts if not h.reachable]
    parts = ["\n".join(lines)] if lines else []
    parts.append(table(headers, rows) if rows else "No proxies.")
    if unreachable:
        parts.append("Unreachable hosts: " + ", ".join(unreachable))
    parts.append(summary)
    return "\n\n".join(parts)


def report_json(report: RunReport) -> dict[str, Any]:
    """The run as JSON: result, revision, plan (``plan --json`` form), outcomes, proxies, hosts."""
    return {
        "result": report.result.value,
        "revision": report.revision,
        "started": report.started.isoformat(),
        "finished": report.finished.isoformat(),
        "problems": list(report.problems),
        "plan": plan_json(report.plan) if report.plan is not None else None,
        "outcomes": [
            {
                "action": o.action.kind.value,
                "proxy": o.action.proxy,
                "host": o.action.host,
                "domain": o.action.domain,
                "result": o.result.value,
                "error": o.error or None,
                "attempts": o.attempts,
                "durationSeconds": round(o.duration_seconds, 3),
            }
            for o in report.outcomes
        ],
        "proxies": [statusdoc.proxy_entry(p) for p in report.proxies],
        "hosts": [
            {
                "name": h.name,
                "reachable": h.reachable,
                "error": h.error or None,
                "state": h.state.value,
                "owned": h.owned,
            }
            for h in report.hosts
        ],
        "conditions": [
            {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
            for c in report.conditions
        ],
        "exitCode": exit_code(report),
    }


def _stalled(report: RunReport, *, as_json: bool) -> int:
    if as_json:
        print(json.dumps(report_json(report), indent=2))
    else:
        print("The fleet repo is invalid; nothing was planned or applied:", file=sys.stderr)
        for problem in report.problems:
            print(f"  {problem}", file=sys.stderr)
    return EXIT_ERROR
