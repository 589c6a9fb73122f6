"""``proxyfleet inventory``: what every host of fleet.yaml runs, owned and foreign, read now.

``--json`` prints the inventory format that ``proxyfleet plan --inventory FILE``
reads (reconciler.core.load.inventory), so ``inventory --json > inv.json`` then
``plan --inventory inv.json`` plans exactly against what was seen. Without it,
a table: one row per domain, with its owner (``fleet/proxy``), ``foreign``
for a domain without proxyfleet metadata, and one row per unreachable host.

Exit codes: 0 every host was read, 3 some host was unreachable (the rest is
still printed), 1 the repo or the config is unusable.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from reconciler.cli import compose, exitcodes
from reconciler.cli.common import (
    add_host_access_arguments,
    add_repo_argument,
    config_error,
    daemon_settings,
    table,
)
from reconciler.cli.logsetup import setup_logging
from reconciler.core.load.inventory import dump_inventory
from reconciler.errors import ConfigError
from reconciler.model import Domain, Inventory

EXIT_OK = exitcodes.OK
EXIT_ERROR = exitcodes.ERROR
EXIT_UNREACHABLE = exitcodes.DEGRADED
TRACE = 5


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "inventory",
        help="list every domain on every host, owned and foreign",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_repo_argument(parser)
    add_host_access_arguments(parser, state_dir=True)
    parser.add_argument(
        "--json", action="store_true", help="print the inventory JSON that plan --inventory reads"
    )
    parser.set_defaults(func=run)


def configure_logging(args: argparse.Namespace) -> None:
    """Warnings by default; -v traces every libvirt call, -vv adds XML and metadata."""
    verbose = int(getattr(args, "verbose", 0) or 0)
    try:
        fmt = daemon_settings(args).log.format
    except ConfigError:
        fmt = "logfmt"
    setup_logging("warning", fmt, verbose=verbose)
    if verbose >= 2:
        logging.getLogger("reconciler.libvirt").setLevel(TRACE)


def run(args: argparse.Namespace) -> int:
    configure_logging(args)
    repo = compose.load_repo_or_complain(args.repo)
    if repo is None:
        return EXIT_ERROR
    try:
        inventory = compose.observe_live(repo, args).inventory
    except ConfigError as exc:
        return config_error(exc)
    if args.json:
        sys.stdout.write(dump_inventory(inventory))
    else:
        print(render_inventory(inventory, fleet=repo.fleet.name))
    if all(host.reachable for host in inventory.hosts):
        return EXIT_OK
    return EXIT_UNREACHABLE


def render_inventory(inventory: Inventory, *, fleet: str) -> str:
    rows: list[list[str]] = []
    for host in inventory.hosts:
        if not host.reachable:
            rows.append([host.name, "-", "unreachable", "-", host.error or ""])
            continue
        if not host.domains:
            rows.append([host.name, "-", "-", "-", "no domains"])
        for domain in host.domains:
            rows.append([host.name, domain.name, domain.state.value, *_owner(domain, fleet)])
    return table(["HOST", "DOMAIN", "STATE", "DIGEST", "OWNER"], rows)


def _owner(domain: Domain, fleet: str) -> list[str]:
    owner = domain.owner
    if owner is None:
        return ["-", "foreign"]
    who = f"{owner.fleet}/{owner.proxy}"
    if owner.fleet != fleet:
        who += " (another fleet)"
    return [owner.digest[:8], who]
