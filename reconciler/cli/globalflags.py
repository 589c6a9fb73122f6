"""The flags every command takes, before or after its name: ``-v``, ``-q``, ``--no-color``,
``-o``.

``proxyfleet -v inventory`` and ``proxyfleet inventory -v`` mean the same, as
kubectl's global flags do. The top-level parser sets their defaults; each
subcommand's parser repeats them with suppressed defaults, so a flag given
after the subcommand overrides one given before and an absent one leaves it.

``--quiet`` keeps only results and errors: log lines under ERROR and the
progress lines commands print while they wait (``say``) are dropped.
``--no-color`` is ``NO_COLOR=1`` (no-color.org) for this command.
``-o json`` (``--output json``) is the command's own ``--json``, as kubectl's ``-o``
reads; a command without JSON output refuses it as a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator

_state = {"quiet": False}


def add_global_flags(parser: argparse.ArgumentParser, *, defaults: bool) -> None:
    """``-v``, ``-q``, ``--no-color`` on ``parser``; ``defaults`` only on the top-level one."""

    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS

    group = parser.add_argument_group("global flags (before or after the command)")
    group.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=default(0),
        help="-v logs every libvirt call; -vv adds domain XML and metadata",
    )
    group.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        default=default(False),
        help="print only results and errors: no progress lines, no log lines under ERROR",
    )
    group.add_argument(
        "--no-color",
        action="store_true",
        default=default(False),
        help="no colors in the output (as NO_COLOR=1 does)",
    )
    group.add_argument(
        "-o",
        "--output",
        choices=OUTPUTS,
        default=default("text"),
        help="json: the command's --json output (commands that print results)",
    )


OUTPUTS = ("text", "json")


def resolve_output(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``-o json`` into the command's ``--json``; a usage error (``parser.error``) for a
    command that has none."""
    if getattr(args, "output", "text") != "json":
        return
    if not hasattr(args, "json"):
        parser.error(f"-o json: proxyfleet {args.command} has no JSON output")
    args.json = True


def add_to_subcommands(parser: argparse.ArgumentParser) -> None:
    """The global flags on every subcommand's parser, nested ones (``hosts check``) too."""
    for sub in subparsers(parser):
        add_global_flags(sub, defaults=False)
        add_to_subcommands(sub)


def subparsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parsers of ``parser``'s subcommands, each once (aliases share a parser)."""
    found: list[argparse.ArgumentParser] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                if all(sub is not seen for seen in found):
                    found.append(sub)
    return found


@contextlib.contextmanager
def applied(args: argparse.Namespace) -> Iterator[None]:
    """The global flags in force for the block (one command), undone after it."""
    quiet = bool(getattr(args, "quiet", False))
    saved_color = os.environ.get("NO_COLOR")
    if getattr(args, "no_color", False):
        os.environ["NO_COLOR"] = "1"
    if quiet:
        logging.disable(logging.WARNING)
    _state["quiet"] = quiet
    try:
        yield
    finally:
        _state["quiet"] = False
        if quiet:
            logging.disable(logging.NOTSET)
        if saved_color is None:
            os.environ.pop("NO_COLOR", None)
        else:
            os.environ["NO_COLOR"] = saved_color


def say(text: str) -> None:
    """A progress line on stderr (what a command waits for), unless ``--quiet``."""
    if not _state["quiet"]:
        print(text, file=sys.stderr, flush=True)
