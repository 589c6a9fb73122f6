"""``proxyfleet apply``: one reconcile, now, from a checkout on this machine.

Loads the repo, takes the fleet's lock (once the hosts are dialling; before
anything is observed: ``ApplyLock``), observes the live hosts, shows the
plan, asks (unless ``--yes``), applies it, checks every proxy and prints the
result. The lock is the one a running daemon holds (docs/operations.md): next
to a daemon that leads the fleet, apply refuses and names the holder; with
``--lock-timeout`` it waits that long for the lock to be free (the daemon stopped).

Exit codes:
  0  every planned action succeeded and every proxy passed its health check
  1  nothing applied: invalid repo or config, a refused or declined
     confirmation, or the run itself broke
  3  applied, but an action failed or was skipped, or a proxy is not healthy
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.cli import exitcodes
from reconciler.cli.applylock import ApplyLock, LockRefused, add_lock_timeout_argument
from reconciler.cli.common import (
    add_age_identity_argument,
    add_host_access_arguments,
    add_repo_argument,
    age_identity_file,
    config_error,
    daemon_settings,
    fleet_settings,
    guard_settings,
    host_factory,
    identity_error,
    image_cache,
    read_limits,
    secret_access,
    ssh_settings,
    state_dir,
    table,
)
from reconciler.cli.gitrevision import start_revision
from reconciler.cli.logsetup import setup_logging
from reconciler.cli.plan import plan_json, render_plan
from reconciler.cli.progress import progress_bars, show_progress_lines
from reconciler.core.load.repofiles import ReadLimits
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.core.status import statusdoc
from reconciler.engine.check import Prober
from reconciler.engine.executor import ImageSource
from reconciler.engine.fencing import fenced
from reconciler.engine.reconcile import Engine, Prepared
from reconciler.engine.runtime import Runtime
from reconciler.errors import ConfigError, InvalidInput, MissingDependency
from reconciler.model import Repo
from reconciler.model.plan import MUTATING
from reconciler.model.report import ActionResult, Health, RunReport
from reconciler.model.settings import ApplySettings, DaemonSettings

EXIT_OK = exitcodes.OK
EXIT_ERROR = exitcodes.ERROR
EXIT_DEGRADED = exitcodes.DEGRADED
BAR_INTERVAL = 0.5
"""Seconds between a download's progress events when a bar shows them."""
LINE_INTERVAL = 5.0
"""Seconds between a download's progress lines otherwise."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "apply",
        help="one reconcile, now: plan against the live hosts, confirm, apply, check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_repo_argument(parser)
    add_host_access_arguments(parser, state_dir=True)
    add_age_identity_argument(parser)
    parser.add_argument("--yes", action="store_true", help="apply without asking")
    parser.add_argument(
        "--json", action="store_true", help="print the result as JSON (needs --yes)"
    )
    add_lock_timeout_argument(parser)
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="do not wait for new VMs to get an IP: check every proxy once and return",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.json and not args.yes:
        print("proxyfleet apply: --json needs --yes (there is no one to ask)", file=sys.stderr)
        return EXIT_ERROR
    try:
        settings = daemon_settings(args)
    except ConfigError as exc:
        return config_error(exc)
    # Warnings and errors only, unless -v: the plan and the table are the output.
    setup_logging("warning", settings.log.format, verbose=getattr(args, "verbose", 0))
    show_progress_lines()
    try:
        identity = age_identity_file(args, settings.secrets.age_identity_file)
        secrets = secret_access(identity, need_values=True)
    except ConfigError as exc:
        return identity_error(exc)
    stop = threading.Event()
    revision = start_revision(args.repo)  # git answers while the repo loads
    limits = read_limits(settings)
    repo = _loaded(args.repo, limits, secrets)
    fleet = repo.fleet.name if repo is not None else None
    lock = ApplyLock(settings, state_dir(args, settings.state_dir), fleet)
    try:
        with _stop_on_signals(stop):
            one = fleet_settings(settings, fleet)
            if read_limits(one) != limits:  # that fleet's entry reads its repo otherwise
                repo = None
            try:
                engine = build_engine(
                    args,
                    one,
                    runtime=Runtime.interruptible(stop),
                    held=lock.held,
                    fleets=settings != one,
                    secrets=secrets,
                )
            except MissingDependency as exc:
                return config_error(exc)
            try:
                return apply_with(
                    args,
                    engine,
                    gate=lambda: lock.take(timeout=args.lock_timeout, stop=stop),
                    revision=revision,
                    loaded=repo,
                )
            except LockRefused:
                return EXIT_ERROR
            finally:
                engine.close()
    finally:
        lock.close()


def build_engine(
    args: argparse.Namespace,
    settings: DaemonSettings,
    *,
    runtime: Runtime,
    held: Callable[[], bool] | None = None,
    fleets: bool = False,
    secrets: SecretAccess | None = None,
) -> Engine:
    """The engine ``apply`` runs: live hosts over SSH, the local image cache, HTTP probes.

    With ``held`` (the fleet lock's), every mutating host call is fenced by it.
    ``fleets``: ``settings`` are one fleet's of a config listing several; its state dir
    (``<stateDir>/fleets/<fleet>``, under ``--state-dir`` when given) is the daemon's.
    """
    from reconciler.adapters.state.historystore import FileHistoryStore
    from reconciler.adapters.surface.probe import HttpProber

    if fleets:  # --state-dir and PROXYFLEET_STATE_DIR name the base, as stateDir does
        state = state_dir(args, settings.state_dir.parent.parent) / "fleets" / str(settings.fleet)
    else:
        state = state_dir(args, settings.state_dir)
    images: ImageSource = image_cache(
        settings,
        state,
        progress_interval=BAR_INTERVAL if bars_wanted(args) else LINE_INTERVAL,
    )
    prober: Prober = HttpProber()
    apply = ApplySettings(
        per_host_concurrency=settings.concurrency.per_host,
        delete_concurrency=settings.concurrency.deletes_per_host,
        replace_timeout=settings.replace_timeout,
    )
    if getattr(args, "no_wait", False):
        apply = dataclasses.replace(apply, ip_wait_timeout=0.0)
    hosts = host_factory(ssh_settings(args, settings.ssh), fleet=settings.fleet)
    return Engine(
        fenced(hosts, held) if held is not None else hosts,
        images=images,
        prober=prober,
        settings=apply,
        runtime=runtime,
        history=FileHistoryStore(state / "history.json"),
        guards=guard_settings(settings, state),
        read_limits=read_limits(settings),
        secrets=secrets,
    )


def apply_with(
    args: argparse.Namespace,
    engine: Engine,
    *,
    gate: Callable[[], None] | None = None,
    revision: Callable[[], str] | None = None,
    loaded: Repo | None = None,
) -> int:
    """The command once its engine exists (tests pass one over fake hosts). ``gate``: the
    fleet lock (``ApplyLock.take``), taken before the hosts are observed. ``revision``:
    the answer of a ``start_revision`` started earlier; asked now when None. ``loaded``:
    the repo as ``run`` loaded it with the engine's limits and secrets (``Engine.prepare``)."""
    root: Path = args.repo
    prepared = engine.prepare(
        root, revision=(revision or start_revision(root))(), gate=gate, loaded=loaded
    )
    if isinstance(prepared, RunReport):
        return _stalled(prepared, as_json=args.json)
    changes = prepared.plan.has_changes
    if not args.json:
        print(render_plan(prepared.plan, color=_use_color()))
    if changes and not args.yes and not _confirmed(prepared):
        return EXIT_ERROR
    with progress_bars(bars_wanted(args)):
        report = engine.finish(prepared)
    if args.json:
        print(json.dumps(report_json(report), indent=2))
    else:
        print()
        print(render_report(report))
    return exit_code(report)


def bars_wanted(args: argparse.Namespace) -> bool:
    """Progress bars while applying: on a terminal, unless the output is JSON."""
    return sys.stdout.isatty() and not args.json


def _use_color() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


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
            {"name": h.name, "reachable": h.reachable, "error": h.error or None}
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


def _loaded(root: Path, limits: ReadLimits, secrets: SecretAccess) -> Repo | None:
    """The repo at ``root``, loaded once for the fleet's name (the lock's) and the run; None
    when it does not load (``Engine.prepare`` loads it again and reports every problem, and
    a repo that does not load is never acted on, so it needs no lock)."""
    try:
        return load_repo_at(root, limits=limits, secrets=secrets)
    except InvalidInput:
        return None


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """First SIGINT/SIGTERM: finish what runs, start nothing new. A second SIGINT aborts."""

    def first(signum: int, _frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        print(
            "\nStopping: actions in flight finish, nothing new starts (again to abort).",
            file=sys.stderr,
        )

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, first) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
