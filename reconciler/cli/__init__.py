"""The ``proxyfleet`` command line: one module per subcommand.

Each command module exposes ``register(subparsers)``, which adds its parser and
sets ``func`` to a ``run(args) -> int`` returning the exit code.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from reconciler import __version__
from reconciler.cli import (
    apply,
    console,
    daemon,
    get,
    hosts,
    info,
    inventory,
    plan,
    reconcile,
    status,
    validate,
)

COMMANDS = (
    validate,
    plan,
    inventory,
    apply,
    daemon,
    hosts,
    status,
    reconcile,
    get,
    info,
    console,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="proxyfleet",
        description="GitOps reconciler for HTTP-proxy VMs on libvirt/KVM hosts.",
    )
    parser.add_argument("--version", action="version", version=f"proxyfleet {__version__}")
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="-v logs every libvirt call; -vv adds domain XML and metadata",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    for command_parser in sub.choices.values():
        command_parser.description = plain(command_parser.description)
    return parser


def plain(text: str | None) -> str | None:
    """Help text as a terminal shows it: the module docstrings' RST literals (``x``)
    become plain x."""
    return text.replace("``", "") if text is not None else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # `proxyfleet plan | head`: the reader left; say nothing more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return 130
    return code
