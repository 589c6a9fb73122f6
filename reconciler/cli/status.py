"""``proxyfleet status``: the last status the daemon wrote back to the repo, as tables.

The daemon commits ``.proxyfleet/status.yaml`` on a branch of its own
(``proxyfleet-status`` by default). This command reads it from the working
tree when that branch is checked out, else from the local branch, else from
``origin/<branch>`` (run ``git fetch`` first for the newest one).

Exit codes: 0 the status was found and printed, 1 it was not found or unreadable.
"""

from __future__ import annotations

import argparse
import json
import stat
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reconciler.cli.common import add_repo_argument, table
from reconciler.core.status import statusdoc
from reconciler.core.status.statusdoc import host_state

STATUS_FILE = "status.yaml"
MAX_STATUS_BYTES = 1024 * 1024


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "status",
        help="the last status the daemon wrote to the repo, as a table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_repo_argument(parser)
    parser.add_argument(
        "--branch", default="proxyfleet-status", help="the status branch (default: %(default)s)"
    )
    parser.add_argument(
        "--path", default=".proxyfleet", help="the status directory (default: %(default)s)"
    )
    parser.add_argument("--json", action="store_true", help="print status.yaml as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    found = read_status(args.repo, branch=args.branch, path=args.path)
    if found is None:
        print(
            f"proxyfleet status: no {args.path}/{STATUS_FILE} in {args.repo} (working tree, "
            f"branch {args.branch} or origin/{args.branch}); has the daemon run yet? "
            f"Try: git -C {args.repo} fetch origin {args.branch}",
            file=sys.stderr,
        )
        return 1
    source, doc = found
    if args.json:
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(render_status(doc, source=source))
    return 0


def read_status(root: Path, *, branch: str, path: str) -> tuple[str, dict[str, Any]] | None:
    """(where it was read, the document), or None when no readable status is found."""
    local = root / path / STATUS_FILE
    # A link (to anywhere) or a huge file on the status branch is not a status.
    if _regular_small(local):
        doc = statusdoc.parse_yaml(local.read_text(encoding="utf-8", errors="replace"))
        if doc is not None:
            return str(local), doc
    for ref in (branch, f"origin/{branch}"):
        text = _git_show(root, f"{ref}:{path}/{STATUS_FILE}")
        doc = statusdoc.parse_yaml(text) if text is not None else None
        if doc is not None:
            return f"{ref}:{path}/{STATUS_FILE}", doc
    return None


def _regular_small(path: Path) -> bool:
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and info.st_size <= MAX_STATUS_BYTES


def _git_show(root: Path, spec: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "show", spec],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def render_status(doc: Mapping[str, Any], *, source: str = "") -> str:
    """The status document for people: revisions, conditions, hosts, proxies, blocked, runs."""
    parts = [_header(doc, source)]
    rows: list[tuple[str, ...]]
    conditions = _dicts(doc.get("conditions"))
    if conditions:
        rows = [
            (_s(c, "type"), _s(c, "status"), _s(c, "reason"), _s(c, "since"), _s(c, "message"))
            for c in conditions
        ]
        parts.append(table(("CONDITION", "STATUS", "REASON", "SINCE", "MESSAGE"), rows))
    hosts = _dicts(doc.get("hosts"))
    if hosts:
        host_rows = [
            (
                _s(h, "name"),
                _s(h, "zone"),
                host_state(h),
                "yes" if h.get("reachable") else "NO",
                _s(h, "owned"),
                _s(h, "foreign"),
                _s(h, "error"),
            )
            for h in hosts
        ]
        host_headers = ("HOST", "ZONE", "STATE", "REACHABLE", "OWNED", "FOREIGN", "ERROR")
        parts.append(table(host_headers, host_rows))
    proxies = _dicts(doc.get("proxies"))
    columns = ("name", "host", "domain", "state", "ip", "health", "since")
    rows = [(*(_s(p, k) or "-" for k in columns), _s(p, "detail")) for p in proxies]
    headers = ("PROXY", "HOST", "DOMAIN", "STATE", "IP", "HEALTH", "SINCE", "DETAIL")
    parts.append(table(headers, rows) if rows else "No proxies.")
    blocked = _dicts(doc.get("blocked"))
    if blocked:
        lines = [
            f"  ! {_s(b, 'action') or 'action'} of {_s(b, 'proxy') or _s(b, 'domain')}"
            f"{' on ' + _s(b, 'host') if _s(b, 'host') else ''}: {_s(b, 'reason')}"
            for b in blocked
        ]
        parts.append("Blocked:\n" + "\n".join(lines))
    runs = _dicts(doc.get("runs"))
    if runs:
        rows = [
            (
                _s(r, "finished"),
                _s(r, "result"),
                _s(r, "revision")[:12],
                _applied(r.get("applied")),
                "; ".join(str(x) for x in (r.get("failed") or []) + (r.get("problems") or [])),
            )
            for r in runs
        ]
        parts.append(table(("RUN FINISHED", "RESULT", "REVISION", "APPLIED", "FAILURES"), rows))
    return "\n\n".join(parts)


def _header(doc: Mapping[str, Any], source: str) -> str:
    lines = [f"Status of {source}" if source else "Status", f"  updated:   {_s(doc, 'updated')}"]
    for key, label in (
        ("observedRevision", "observed"),
        ("lastAppliedRevision", "applied"),
        ("lastAttemptedRevision", "attempted"),
    ):
        lines.append(f"  {label + ':':<10} {_s(doc, key) or '-'}")
    if doc.get("suspended"):
        lines.append("  SUSPENDED (policy.suspend): nothing is changed")
    return "\n".join(lines)


def _applied(value: Any) -> str:
    if not isinstance(value, Mapping) or not value:
        return "-"
    return ", ".join(f"{n} {kind}" for kind, n in value.items())


def _dicts(value: Any) -> Sequence[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


def _s(mapping: Mapping[str, Any], key: str) -> str:
    value = mapping.get(key)
    return "" if value is None else str(value)
