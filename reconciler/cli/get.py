"""``proxyfleet get``: the proxies and hosts as the running daemon sees them now.

Asked over the daemon's control socket (root only): no git fetch and no host
call by this command; the daemon answers from its last run, so the table is as
fresh as that run (its time is printed; ``proxyfleet reconcile`` makes a new
one). A stalled last run keeps the picture of the run before it, as the status
file does. During the daemon's first run it says so and shows what that run
has observed so far: the hosts, and the fleet's VMs on them, not checked yet.
``--json`` prints the daemon's answer: the status document (status.yaml's
shape) under ``status``, the daemon's ``role``, whether it is ``reconciling``
now, and ``firstRun: true`` (``status``: what is observed so far, or null).

Exit codes: 0 printed, 4 this daemon stands by (the leader is named), 1 the
daemon could not be asked or has not started a run yet.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from reconciler.cli.common import table
from reconciler.cli.controlclient import (
    EXIT_ERROR,
    EXIT_OK,
    add_socket_arguments,
    ask,
    complain,
    standby,
)
from reconciler.errors import ConfigError, ControlError

TIMEOUT = 30.0
"""Seconds for the daemon's answer (it answers from memory)."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "get",
        help="list proxies and hosts live from the running daemon",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_socket_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        answer = next(iter(ask(args, {"command": "get"}, timeout=TIMEOUT)), None)
    except (ControlError, ConfigError) as exc:
        return complain("get", exc)
    if answer is None:
        return complain("get", ControlError("the daemon hung up without an answer"))
    if answer.get("standby"):
        return standby("get", answer)
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True))
        return EXIT_OK
    status = answer.get("status")
    if answer.get("firstRun"):
        print(render_first_run(status, role=str(answer.get("role", ""))))
        return EXIT_OK
    if not isinstance(status, Mapping):
        print("proxyfleet get: the daemon has not finished a run yet.", file=sys.stderr)
        return EXIT_ERROR
    print(render(status, role=str(answer.get("role", "")), busy=bool(answer.get("reconciling"))))
    return EXIT_OK


def render(status: Mapping[str, Any], *, role: str, busy: bool) -> str:
    revision = str(status.get("observedRevision", ""))[:12] or "-"
    head = f"As of the daemon's last run, finished {status.get('updated', '-')} at {revision}"
    head += "; a run is going now." if busy else "."
    return _tables(status, head=head, role=role)


def render_first_run(status: Any, *, role: str) -> str:
    """The daemon's first run is going: what it has observed so far, or that it has not yet."""
    head = "The daemon's first run is in progress"
    if not isinstance(status, Mapping):
        return _tables({}, head=f"{head}; it has observed nothing yet.", role=role)
    head += "; what it has observed so far (no proxy checked yet):"
    return _tables(status, head=head, role=role)


def _tables(status: Mapping[str, Any], *, head: str, role: str) -> str:
    if role:
        head += f"\nDaemon: {role}."
    if not status:
        return head
    proxies = _dicts(status.get("proxies"))
    columns = ("name", "zone", "host", "state", "ip", "health", "since", "detail")
    rows = [tuple(_s(p, k) or "-" for k in columns) for p in proxies]
    headers = ("PROXY", "ZONE", "HOST", "STATE", "IP", "HEALTH", "SINCE", "DETAIL")
    parts = [head, table(headers, rows) if rows else "No proxies."]
    hosts = _dicts(status.get("hosts"))
    if hosts:
        host_rows = [
            (
                _s(h, "name"),
                _s(h, "zone"),
                "yes" if h.get("reachable") else "NO",
                _s(h, "owned"),
                _s(h, "foreign"),
                _s(h, "error") or "-",
            )
            for h in hosts
        ]
        parts.append(table(("HOST", "ZONE", "REACHABLE", "OWNED", "FOREIGN", "ERROR"), host_rows))
    return "\n\n".join(parts)


def _dicts(value: Any) -> Sequence[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _s(mapping: Mapping[str, Any], key: str) -> str:
    value = mapping.get(key)
    return "" if value is None else str(value)
