"""The ``proxyfleet`` command line: one module per subcommand.

Each command module exposes ``register(subparsers)``, which adds its parser and
sets ``func`` to a ``run(args) -> int`` returning the exit code.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Sequence
from typing import Any

from reconciler.cli import (
    apply,
    completion,
    configcheck,
    console,
    daemon,
    deployfiles,
    get,
    hosts,
    info,
    inventory,
    plan,
    reconcile,
    status,
    validate,
)
from reconciler.cli.exitcodes import INTERRUPTED, Parser
from reconciler.cli.globalflags import (
    add_global_flags,
    add_to_subcommands,
    applied,
    resolve_output,
    subparsers,
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
    configcheck,
    deployfiles,
    completion,
)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="proxyfleet",
        description="GitOps reconciler for HTTP-proxy VMs on libvirt/KVM hosts.",
    )
    parser.add_argument(
        "--version", action=VersionAction, help="show the version and the git commit, and exit"
    )
    add_global_flags(parser, defaults=True)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    add_to_subcommands(parser)
    plain_help(parser)
    return parser


class VersionAction(argparse.Action):
    """``--version``: ``proxyfleet 0.3.0 (commit 1c6b26c0a1b2, from git)``; git is asked
    only when the flag is given (reconciler.buildinfo)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_args: object, **_kw: object) -> None:
        from reconciler.buildinfo import build

        print(build().line())
        parser.exit()


def plain(text: str | None) -> str | None:
    """Help text as a terminal shows it: the module docstrings' RST literals (``x``)
    become plain x."""
    return text.replace("``", "") if text is not None else None


def plain_help(parser: argparse.ArgumentParser) -> None:
    """``plain`` on every description, epilog and option help, nested commands too."""
    parser.description = plain(parser.description)
    parser.epilog = plain(parser.epilog)
    for action in parser._actions:
        action.help = plain(action.help)
    for sub in subparsers(parser):
        plain_help(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    resolve_output(parser, args)
    try:
        with applied(args):
            code: int = args.func(args)
            sys.stdout.flush()
    except BrokenPipeError:
        # `proxyfleet plan | head`: the reader left; say nothing more.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:
        return INTERRUPTED
    return code


def command(argv: Sequence[str] | None = None) -> int:
    """The ``proxyfleet`` program: ``main`` in a process that ends when it returns.

    Everything a command built stays alive until the process ends, and at exit the
    interpreter walks all of it once more looking for cycles: 1.5-2 s of a busy
    machine's CPU after ``apply`` created 20 VMs (docs/performance.md, row 2a).
    Frozen, the objects are still freed and the ``atexit`` hooks, ``weakref``
    finalizers and stream flushes all still run; only cycles the command left
    behind are not collected first, and the process's end releases their memory,
    files and sockets. (Tests call ``main``, which leaves their process's collector
    alone.)
    """
    code = main(argv)
    gc.freeze()
    return code
