"""The exit codes of every ``proxyfleet`` command: one scheme, one table (docs/operations.md,
"Exit codes").

A code names an outcome, never a command's private meaning, so a script reads
``apply``, ``reconcile`` and ``plan`` the same way; a mistyped command line
(``plan --jsn``) exits 64 (sysexits' EX_USAGE), which no outcome shares, so CI
never reads a typo as "changes pending".
"""

from __future__ import annotations

import argparse
from typing import NoReturn

OK = 0
"""Done, and everything is as it should be: applied and Ready, every host ready, no changes."""
ERROR = 1
"""The command could not do its job: invalid repo, inventory or config, a run that stalled or
broke, a daemon that could not be asked; nothing (more) was done."""
CHANGES = 2
"""``plan`` only, as Terraform's ``-detailed-exitcode``: the plan has changes."""
DEGRADED = 3
"""Done as far as it could go, but not everything is well: a host unreachable, an action
failed, a proxy not healthy, a safety rule blocked something (the fleet is not Ready), a host
not ready for VMs."""
STANDBY = 4
"""The daemon asked stands by: another one leads the fleet (named in the message)."""
USAGE = 64
"""The command line is wrong: an unknown command or flag, a missing or malformed value."""
INTERRUPTED = 130
"""Ctrl-C (SIGINT), as a shell reports it."""


def for_run(result: str, *, ready: bool) -> int:
    """A finished run's code, the same for ``apply`` and ``reconcile``: ``result`` the run's
    (success, partial, stalled, failed), ``ready`` its Ready condition."""
    if result in ("stalled", "failed"):
        return ERROR
    if result != "success" or not ready:
        return DEGRADED
    return OK


class Parser(argparse.ArgumentParser):
    """argparse with usage errors on ``USAGE`` instead of its 2 (which is ``plan``'s
    "changes"); the subcommands' parsers are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.print_usage()
        self.exit(USAGE, f"{self.prog}: error: {message}\n")
