"""``proxyfleet validate [--repo DIR]``: check a fleet repo, for its CI and pre-commit hook.

Prints every problem as ``path:line:col: field.path: message`` on stderr (paths
relative to DIR) and exits 1; a valid repo prints one summary line and exits 0.
``--json`` prints instead, on stdout, ``{"valid": …, "summary": …, "problems": [{"file",
"line", "column", "field", "message"}, …]}`` (as ``terraform validate -json``), with
the same exit codes. Nothing here talks to a host.

Secrets: without ``--age-identity`` every ``${secret:NAME}`` must name an
existing ``secrets/NAME.age``; with it, each must also decrypt. No value is
ever printed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reconciler.cli import compose
from reconciler.cli.common import (
    add_age_identity_argument,
    age_identity_file,
    identity_error,
)
from reconciler.errors import ConfigError, InvalidInput, Problem
from reconciler.model.fleet import Repo


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "validate",
        help="check a fleet repo (schemas and cross-references); exit 1 on any error",
        description="Check every manifest of a fleet repo. Errors go to stderr, one per line.",
    )
    parser.add_argument(
        "--repo",
        type=Path,
        metavar="DIR",
        help="the fleet repo (the directory holding fleet.yaml; default: .)",
    )
    parser.add_argument(
        "dir",
        nargs="?",
        type=Path,
        metavar="DIR",
        help="the same as --repo, the older way to say it",
    )
    add_age_identity_argument(parser, config=False)
    parser.add_argument(
        "--json",
        action="store_true",
        help="print the verdict and every problem (file, line, column, field, message) as JSON",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.repo is not None and args.dir is not None and args.repo != args.dir:
        print("proxyfleet validate: give the repo once (--repo or DIR)", file=sys.stderr)
        return 1
    root = args.repo or args.dir or Path(".")
    try:
        secrets = compose.secret_access(age_identity_file(args), need_values=False)
    except ConfigError as exc:
        return identity_error(exc)
    try:
        repo = compose.load(root, secrets=secrets)
    except InvalidInput as exc:
        if args.json:
            print(as_json(exc.problems, None))
        else:
            for problem in exc.problems:
                print(problem, file=sys.stderr)
        return 1
    print(as_json((), summary(repo)) if args.json else summary(repo))
    return 0


def as_json(problems: Sequence[Problem], found: str | None) -> str:
    """``validate --json``'s document: the verdict, the summary line, every problem."""
    return json.dumps(
        {
            "valid": not problems,
            "summary": found,
            "problems": [dataclasses.asdict(problem) for problem in problems],
        },
        indent=2,
    )


def summary(repo: Repo) -> str:
    """``5 proxies in 2 zones on 3 hosts``."""
    zones = len({host.zone for host in repo.fleet.hosts})
    hosts = len(repo.fleet.hosts)
    return (
        f"{_count(len(repo.proxies), 'proxy', 'proxies')} in "
        f"{_count(zones, 'zone', 'zones')} on {_count(hosts, 'host', 'hosts')}"
    )


def _count(number: int, one: str, many: str) -> str:
    return f"{number} {one if number == 1 else many}"
