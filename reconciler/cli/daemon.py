"""``proxyfleet run``: the daemon (systemd's proxyfleet.service runs this).

Only its command line is here; ``reconciler.cli.serve`` does the work and is
imported when the daemon starts, so that every other command starts without
loading the daemon's parts (metrics, HTTP API, watcher, ring: about 0.09 s).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from reconciler.core.load.settings import DEFAULT_CONFIG


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "run",
        help="the daemon: reconcile on every commit, webhook, SIGHUP and interval",
        description="Run the reconcile daemon: pull the fleet repo, reconcile, report "
        "(metrics, status branch, systemd notifications) until SIGTERM.",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        metavar="FILE",
        help=f"daemon config (default: {DEFAULT_CONFIG})",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from reconciler.cli import serve  # the daemon's parts load only here

    return serve.run(args)
