"""``proxyfleet config check [FILE]``: is the daemon config valid? (as ``sshd -t`` asks)

Reads FILE (default /etc/proxyfleet/proxyfleet.yaml) with the daemon's own
loader and says what the daemon would use, without starting it: no listener,
no control socket, no git fetch, no host call. Files the config names (the SSH
key, the age identity) are not opened; ``hosts check`` tries the key.

Exit codes: 0 the config is valid, 1 it is not (every problem printed as
``file:line:col: field: message`` on stderr), 64 a usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from reconciler.cli import exitcodes
from reconciler.core.load.settings import DEFAULT_CONFIG, load_settings
from reconciler.errors import ConfigError
from reconciler.model.settings import DaemonSettings


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "config",
        help="check the daemon config",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="config_command", required=True, metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="validate the daemon config without starting the daemon",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    check.add_argument(
        "file",
        nargs="?",
        type=Path,
        default=DEFAULT_CONFIG,
        metavar="FILE",
        help=f"the daemon config (default: {DEFAULT_CONFIG})",
    )
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.file)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        print(f"{args.file}: the config is invalid; the daemon would not start.", file=sys.stderr)
        return exitcodes.ERROR
    print(f"{args.file}: ok ({summary(settings)})")
    return exitcodes.OK


def summary(settings: DaemonSettings) -> str:
    """What the daemon would serve: ``fleets a, b`` or ``repo URL``, and its interval."""
    if settings.fleets:
        what = "fleets " + ", ".join(one.fleet for one in settings.fleets)
    else:
        what = f"repo {settings.repo.url}"
    return f"{what}, every {settings.interval:g} s"
