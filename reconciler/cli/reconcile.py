"""``proxyfleet reconcile``: ask the running daemon for a run now, wait for it, print its result.

The request goes over the daemon's control socket (root only; no git fetch or
host call by this command). The run that answers is the first one that starts
after the request: when a run is going already, the next one (which fetches
the repo again). Its outcome is printed as the daemon logged it: result,
revision, duration, the Ready condition, what was applied, what failed, what
a safety rule blocked, and the problems of a stalled run. While it waits, it says
on stderr when the run was requested, then streams the run's steps as the daemon
logs them (what its journal shows for that run: each action, each health gate),
and, after 30 s without one, how long it has waited; ``--quiet`` drops those lines.

Exit codes, as ``apply`` gives them for the same run (docs/operations.md, "Exit codes"):
0 the run succeeded and the fleet is Ready; 3 it went as far as it could but the fleet is
not Ready (an action failed, a host unreachable, a proxy unhealthy, something blocked);
1 the run stalled or broke, or the daemon could not be asked or gave no result within
--timeout; 4 this daemon stands by (another one leads the fleet; it is named); 64 a
usage error.
"""

from __future__ import annotations

import argparse
import queue
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from reconciler.cli import exitcodes
from reconciler.cli.controlclient import (
    add_socket_arguments,
    ask,
    complain,
    duration,
    standby,
)
from reconciler.cli.globalflags import say
from reconciler.errors import ConfigError, ControlError

HEARTBEAT = 30.0
"""Seconds between the "still waiting" lines while the run goes on."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "reconcile",
        help="ask the running daemon for a run now and print its result",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_socket_arguments(parser)
    parser.add_argument(
        "--timeout",
        type=duration,
        default=3600.0,
        metavar="DURATION",
        help="how long to wait for the run's result: 90, 30s, 5m, 1h (default: 1h)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        for answer in with_heartbeat(ask(args, {"command": "reconcile"}, timeout=args.timeout)):
            event = answer.get("event")
            if event == "queued":
                going = (
                    " (a run is going; yours is the next one)" if answer.get("runningNow") else ""
                )
                say(f"Run requested{going}; waiting for its result.")
            elif event == "step":
                say(f"  {answer.get('message', '')}")
            elif event == "standby":
                return standby("reconcile", answer)
            elif event == "stopping":
                return complain("reconcile", ControlError("the daemon stopped before the run"))
            elif event == "finished":
                run_doc = answer.get("run")
                if not isinstance(run_doc, Mapping):
                    break
                print(render_run(run_doc))
                return run_exit_code(run_doc)
    except (ControlError, ConfigError) as exc:
        return complain("reconcile", exc)
    return complain("reconcile", ControlError("the daemon hung up without a result"))


def with_heartbeat(answers: Iterator[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    """``answers`` as they come, with a "still waiting" line every ``HEARTBEAT`` seconds
    between them. The answers are read on a thread, so Ctrl-C stops the wait at once;
    an error reading them is raised here."""
    inbox: queue.Queue[tuple[Mapping[str, Any] | None, Exception | None]] = queue.Queue()

    def read() -> None:
        try:
            for answer in answers:
                inbox.put((answer, None))
        except Exception as exc:  # noqa: BLE001 - carried to the reading thread, raised there
            inbox.put((None, exc))
        else:
            inbox.put((None, None))

    threading.Thread(target=read, name="reconcile-answers", daemon=True).start()
    started = time.monotonic()
    while True:
        try:
            answer, error = inbox.get(timeout=HEARTBEAT)
        except queue.Empty:
            waited = elapsed(time.monotonic() - started)
            say(f"Still waiting for the run: {waited} so far (proxyfleet get shows it live).")
            continue
        if error is not None:
            raise error
        if answer is None:
            return
        yield answer


def elapsed(seconds: float) -> str:
    """``45s``, ``2m05s``, ``1h02m``."""
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def run_exit_code(run: Mapping[str, Any]) -> int:
    """The finished run's code: its result and its Ready condition (``exitcodes.for_run``)."""
    ready = any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") is True
        for c in run.get("conditions", [])
    )
    return exitcodes.for_run(str(run.get("result")), ready=ready)


def render_run(run: Mapping[str, Any]) -> str:
    """The run as a few lines: the headline, then what was done and what went wrong."""
    conditions = {c.get("type"): c for c in run.get("conditions", []) if isinstance(c, Mapping)}
    ready = conditions.get("Ready")
    state = "Ready" if ready and ready.get("status") else f"not Ready ({_reason(ready)})"
    revision = str(run.get("revision", ""))[:12] or "no revision"
    lines = [
        f"Run {run.get('result')} at {revision} in {float(run.get('durationSeconds', 0)):.1f}s: "
        f"{state}; {run.get('healthy', 0)}/{run.get('proxies', 0)} proxies healthy."
    ]
    applied = run.get("applied") or {}
    if applied:
        lines.append("  applied: " + ", ".join(f"{k} {v}" for k, v in sorted(applied.items())))
    lines += [f"  failed: {line}" for line in run.get("failed", [])]
    lines += [f"  blocked: {line}" for line in run.get("blocked", [])]
    lines += [f"  problem: {line}" for line in run.get("problems", [])]
    for ctype, cond in sorted(conditions.items(), key=lambda kv: str(kv[0])):
        if ctype in ("Ready", "Reconciling", "Stalled") and not (
            ctype == "Stalled" and cond.get("status")
        ):
            continue
        if cond.get("status"):
            lines.append(f"  {ctype}: {cond.get('message') or cond.get('reason')}")
    if ready and not ready.get("status") and ready.get("message"):
        lines.append(f"  Ready: {ready.get('message')}")
    return "\n".join(lines)


def _reason(condition: Mapping[str, Any] | None) -> str:
    return str(condition.get("reason", "unknown")) if condition else "unknown"
