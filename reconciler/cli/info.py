"""``proxyfleet info NAME``: one proxy as the running daemon knows it.

Its VM (domain, host, state, IP, health and since when), where the VM came from
(the commit and time of its create and its image, as recorded in the VM's own
metadata), its health history (the record the daemon keeps across runs:
failing since, healthy once since it was made, restarts; and its state in each
of the last runs the daemon holds, newest first) and a halted rollout naming
it. Asked over the daemon's control socket (root only), answered from memory:
no git fetch and no host call. ``--json`` prints the daemon's answer.

Exit codes: 0 printed, 4 this daemon stands by (the leader is named), 1 the
daemon could not be asked or knows no such proxy.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from typing import Any

from reconciler.cli.common import table
from reconciler.cli.controlclient import (
    EXIT_OK,
    add_socket_arguments,
    ask,
    complain,
    standby,
)
from reconciler.errors import ConfigError, ControlError

TIMEOUT = 30.0


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "info",
        help="one proxy: VM, host, IP, health history and provenance, from the daemon",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", metavar="NAME", help="the proxy (metadata.name)")
    add_socket_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the daemon's answer as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        message = {"command": "info", "name": args.name}
        answer = next(iter(ask(args, message, timeout=TIMEOUT)), None)
    except (ControlError, ConfigError) as exc:
        return complain("info", exc)
    if answer is None:
        return complain("info", ControlError("the daemon hung up without an answer"))
    if answer.get("standby"):
        return standby("info", answer)
    if args.json:
        print(json.dumps(answer, indent=2, sort_keys=True))
    else:
        print(render(answer))
    return EXIT_OK


def render(answer: Mapping[str, Any]) -> str:
    proxy = _map(answer.get("proxy"))
    prov = _map(answer.get("provenance"))
    record = _map(answer.get("history"))
    fields = [
        ("Proxy", proxy.get("name")),
        ("Zone", proxy.get("zone")),
        ("Host", proxy.get("host")),
        ("VM", proxy.get("domain")),
        ("State", proxy.get("state")),
        ("IP", proxy.get("ip")),
        ("Health", f"{proxy.get('health', '-')} since {proxy.get('since', '-')}"),
        ("Detail", proxy.get("detail")),
        ("Created", prov.get("created")),
        ("From commit", prov.get("revision")),
        ("Image", _image(prov)),
        ("Spec digest", prov.get("digest")),
        ("Failing since", record.get("failingSince")),
        ("Healthy once", _yes(record.get("healthyOnce"))),
        ("Restarts", ", ".join(record.get("restarts") or []) or None),
        ("As of", f"the run finished {answer.get('asOf', '-')}"),
    ]
    lines = [f"{label + ':':<15}{value}" for label, value in fields if value not in (None, "")]
    halt = _map(answer.get("halt"))
    if halt:
        lines.append(
            f"{'Rollout:':<15}HALTED at {halt.get('domain')} since {halt.get('since')}: "
            f"{halt.get('reason')}"
        )
    runs = [r for r in answer.get("runs", []) if isinstance(r, Mapping)]
    if runs:
        columns = ("finished", "result", "revision", "state", "health", "domain", "detail")
        rows = [
            tuple((str(r.get(k) or "-")[:12] if k == "revision" else str(r.get(k) or "-"))
                  for k in columns)
            for r in runs
        ]  # fmt: skip
        headers = ("RUN FINISHED", "RESULT", "REVISION", "STATE", "HEALTH", "VM", "DETAIL")
        lines += ["", "Health in the daemon's last runs (newest first):", table(headers, rows)]
    return "\n".join(lines)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _image(prov: Mapping[str, Any]) -> str | None:
    if not prov.get("image"):
        return None
    sha = str(prov.get("imageSha256") or "")
    return f"{prov['image']}" + (f" (sha256 {sha[:12]})" if sha else "")


def _yes(value: Any) -> str | None:
    if value is None:
        return None
    return "yes" if value else "no (still starting, or never passed its check)"
