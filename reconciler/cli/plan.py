"""``proxyfleet plan``: what a reconcile would do, Terraform-style; changes nothing.

With ``--inventory FILE`` it plans offline against an inventory in the
``proxyfleet inventory --json`` format; without it, it reads the live hosts
(host access as for ``apply``) and plans exactly as ``apply`` would: its guards,
and the state dir's history (halts, back-offs) and delete window. ``--json``
prints the plan as JSON.

``-out FILE`` saves that plan with what it was computed from, mode 0600 and
without a secret's value; ``proxyfleet apply FILE`` applies it, or refuses when
the repo, the hosts or the plan changed since. Not with ``--inventory``.

Listing symbols: ``+`` create, ``-`` delete or cleanup (unused volumes of an
interrupted create), ``-/+`` replace, ``~`` start or
relabel (the VM's recorded protect flag), ``!`` blocked (with the action it
stopped), ``?`` abandoned. A new VM whose userData uses secrets lists their
names, each value shown as ``(sensitive)``. Up-to-date VMs
are counted, not listed; a kept VM with something to say (shut off under
drift detect, paused, crashed) is listed with ``=``.

Exit codes (docs/operations.md, "Exit codes"):
  0   nothing to do: keep and abandon only
  1   error: invalid repo or inventory, unusable config
  2   the plan has changes (anything else, blocked actions included)
  3   the plan is incomplete: a host could not be read (its actions are blocked)
  64  usage error
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from reconciler.cli import compose, exitcodes, savedplan
from reconciler.cli.applyengine import Started, with_engine
from reconciler.cli.common import (
    add_age_identity_argument,
    add_host_access_arguments,
    add_repo_argument,
    config_error,
    configured_identity,
    identity_error,
)
from reconciler.core.load.inventory import load_inventory
from reconciler.core.plan.planner import plan
from reconciler.errors import ConfigError, InvalidInput
from reconciler.model import Action, ActionKind, Inventory, Plan
from reconciler.model.plan import (
    Blocked,
    Cleanup,
    Create,
    Keep,
    RemoveBase,
    Replace,
    blocked_kind,
    replaced,
)
from reconciler.model.report import RunReport
from reconciler.model.secrets import SENSITIVE

EXIT_NO_CHANGES = exitcodes.OK
EXIT_ERROR = exitcodes.ERROR
EXIT_CHANGES = exitcodes.CHANGES
EXIT_INCOMPLETE = exitcodes.DEGRADED

SYMBOLS = {
    ActionKind.CREATE: "+",
    ActionKind.DELETE: "-",
    ActionKind.REPLACE: "-/+",
    ActionKind.START: "~",
    ActionKind.RELABEL: "~",
    ActionKind.CLEANUP: "-",
    ActionKind.BLOCKED: "!",
    ActionKind.ABANDON: "?",
    ActionKind.KEEP: "=",
}
_COLORS = {
    ActionKind.CREATE: "32",  # green
    ActionKind.DELETE: "31",  # red
    ActionKind.REPLACE: "33",  # yellow
    ActionKind.START: "36",  # cyan
    ActionKind.RELABEL: "36",
    ActionKind.CLEANUP: "31",
    ActionKind.BLOCKED: "1;35",  # bold magenta
    ActionKind.ABANDON: "2",  # dim
    ActionKind.KEEP: "2",
}
_SUMMARY = (
    (ActionKind.CREATE, "to create"),
    (ActionKind.START, "to start"),
    (ActionKind.RELABEL, "to relabel"),
    (ActionKind.REPLACE, "to replace"),
    (ActionKind.DELETE, "to delete"),
    (ActionKind.CLEANUP, "to clean up"),
    (ActionKind.BLOCKED, "blocked"),
    (ActionKind.KEEP, "kept"),
    (ActionKind.ABANDON, "abandoned"),
)


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "plan",
        help="show what a reconcile would do; exit 0 no changes, 2 changes, 3 a host unread, "
        "1 error",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_repo_argument(parser)
    parser.add_argument(
        "--inventory",
        type=Path,
        metavar="FILE",
        help="plan against this inventory (`proxyfleet inventory --json`) instead of live hosts",
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(
        "-out",
        "--out",
        type=Path,
        metavar="FILE",
        help="save the plan (mode 0600, no secret values) for `proxyfleet apply FILE`",
    )
    add_host_access_arguments(parser, state_dir=True)
    add_age_identity_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.inventory is None:
        return with_engine(args, args.repo, lambda started: _live(args, started), locked=False)
    if args.out is not None:
        print(
            "proxyfleet plan: -out saves a plan of the live hosts; "
            "a plan against --inventory cannot be applied",
            file=sys.stderr,
        )
        return exitcodes.USAGE
    try:
        # Digests cover each secret's fingerprint: a plan needs the values, never shows them.
        identity = configured_identity(args)
    except ConfigError as exc:
        return config_error(exc)
    try:
        secrets = compose.secret_access(identity, need_values=True)
    except ConfigError as exc:
        return identity_error(exc)
    repo = compose.load_repo_or_complain(args.repo, secrets)
    if repo is None:
        return EXIT_ERROR
    try:
        inventory = load_inventory(args.inventory)
    except InvalidInput as exc:
        print(f"{args.inventory}: the inventory is invalid:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_ERROR
    result = plan(repo, inventory)
    if args.json:
        print(json.dumps(plan_json(result), indent=2))
    else:
        print(render_plan(result, color=_use_color()))
    return plan_exit_code(result, inventory)


def _live(args: argparse.Namespace, started: Started) -> int:
    """A plan of the live hosts, made as ``apply`` makes it (its guards, the state dir's
    history and delete window; no lock: nothing is changed); saved with ``-out``."""
    prepared = started.engine.prepare(args.repo, revision=started.revision(), loaded=started.loaded)
    if isinstance(prepared, RunReport):
        print(f"{args.repo}: nothing was planned:", file=sys.stderr)
        for problem in prepared.problems:
            print(f"  {problem}", file=sys.stderr)
        return EXIT_ERROR
    listing = plan_json(prepared.plan)
    if args.out is not None:
        saved = savedplan.saved(prepared, root=args.repo, listing=listing, path=args.out)
        savedplan.write(args.out, saved)
    if args.json:
        print(json.dumps(listing, indent=2))
    else:
        print(render_plan(prepared.plan, color=_use_color()))
        if args.out is not None:
            print(f"\nSaved the plan to {args.out}. To apply it: proxyfleet apply {args.out}")
    return plan_exit_code(prepared.plan, prepared.observation.inventory)


def plan_exit_code(result: Plan, inventory: Inventory) -> int:
    """3 when a host could not be read (as ``apply`` and ``reconcile`` say for the same
    hosts: the fleet cannot be Ready), else 2 for changes, else 0."""
    if any(not host.reachable for host in inventory.hosts):
        return EXIT_INCOMPLETE
    return EXIT_CHANGES if result.has_changes else EXIT_NO_CHANGES


def _use_color() -> bool:
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def plan_json(result: Plan) -> dict[str, Any]:
    """The ``plan --json`` document: every action (keeps too) and the summary counts."""
    return {"actions": [action_json(a) for a in result.actions], "summary": result.summary()}


def action_json(action: Action) -> dict[str, Any]:
    """One action; fields that do not apply are null (every key is always present)."""
    replaces = replaced(action)
    blocks = blocked_kind(action)
    return {
        "action": action.kind.value,
        "proxy": action.proxy,
        "host": action.host,
        "domain": action.domain,
        "digest": action.digest,
        "reason": action.reason,
        "blocks": blocks.value if blocks is not None else None,
        "replaces": {"host": replaces.host, "domain": replaces.domain} if replaces else None,
        "volumes": list(action.volumes)
        if isinstance(action, Cleanup | RemoveBase | Blocked)
        else [],
        "batch": action.batch if isinstance(action, Replace) else None,
        "secrets": dict.fromkeys(_secrets(action), SENSITIVE),
    }


def _secrets(action: Action) -> list[str]:
    """The names of the secrets a new VM's userData uses (their values are never shown)."""
    if isinstance(action, Create | Replace):
        return [secret.name for secret in action.vm.cloud_init.secrets]
    return []


def render_plan(result: Plan, *, color: bool) -> str:
    """The listing: one line per action worth reading, then the summary line."""
    lines = [_line(a, color=color) for a in result.actions if _listed(a)]
    return "\n".join([*lines, *([""] if lines else []), summary_line(result)])


def _listed(action: Action) -> bool:
    return not (isinstance(action, Keep) and action.up_to_date)


def _line(action: Action, *, color: bool) -> str:
    symbol = SYMBOLS[action.kind].rjust(3)
    blocks, old = blocked_kind(action), replaced(action)
    verb = action.kind.value if blocks is None else f"blocked {blocks.value}"
    where = " ".join(
        part
        for part in (
            action.proxy or "",
            f"on {action.host}" if action.host else "",
            action.domain or "",
            f"(replaces {old.host}/{old.domain})" if old else "",
        )
        if part
    )
    head = f"{symbol} {verb:<15} {where}"
    if color:
        head = f"\033[{_COLORS[action.kind]}m{head}\033[0m"
    used = _secrets(action)
    secrets = f"\n      secrets: {', '.join(used)} {SENSITIVE}" if used else ""
    return f"{head}\n      {action.reason}{secrets}"


def summary_line(result: Plan) -> str:
    """``Plan: 1 to create, 0 to start, ...`` or ``No changes. 12 kept, 0 abandoned.``"""
    counts = result.summary()
    parts = ", ".join(f"{counts[kind.value]} {words}" for kind, words in _SUMMARY)
    if not result.has_changes:
        kept = counts[ActionKind.KEEP.value]
        abandoned = counts[ActionKind.ABANDON.value]
        return f"No changes. {kept} kept, {abandoned} abandoned."
    return f"Plan: {parts}."
