"""The fleet lock of one ``proxyfleet apply`` (the daemon's lock, docs/operations.md)."""

from __future__ import annotations

import argparse
import math
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reconciler.cli import compose
from reconciler.cli.common import config_error, take_lock
from reconciler.core.load import durations
from reconciler.errors import ConfigError
from reconciler.model.settings import DaemonSettings
from reconciler.ports.locks import FleetLock, LockService


def add_lock_timeout_argument(parser: argparse.ArgumentParser) -> None:
    """``--lock-timeout DURATION`` (as terraform's ``-lock-timeout``), and ``--wait``, its
    deprecated spelling for ``forever``."""
    parser.add_argument(
        "--lock-timeout",
        type=lock_timeout,
        default=0.0,
        metavar="DURATION",
        help="when another actor (a daemon, another apply) holds the fleet lock, wait this "
        "long for it: 0 (the default: refuse at once), 90, 30s, 10m, 1h, or forever",
    )
    parser.add_argument(
        "--wait",
        action=DeprecatedWait,
        help="deprecated: --lock-timeout forever",
    )


def lock_timeout(text: str) -> float:
    """An argparse type: ``forever`` is ``math.inf``; else a duration or seconds, 0 or more."""
    if text.strip() == "forever":
        return math.inf
    try:
        value = durations.from_text(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, or forever") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text}")
    return value


class DeprecatedWait(argparse.Action):
    """``--wait``: ``--lock-timeout forever``, with a line on stderr saying so."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, "lock_timeout", nargs=0, **kwargs)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, *_: object
    ) -> None:
        print("proxyfleet apply: --wait is deprecated; say --lock-timeout forever", file=sys.stderr)
        namespace.lock_timeout = math.inf


class LockRefused(Exception):
    """The fleet lock is not ours (or its service unusable), and it said so: nothing was
    observed, planned or applied."""


class ApplyLock:
    """The fleet lock of one ``apply``, taken where the engine's ``gate`` runs: once the
    repo has loaded and the hosts have started dialling, before anything is observed. So
    loading the coordination library (tooz, about 0.1 s) and asking its service overlap
    the SSH handshakes instead of coming before them, and a repo that does not load
    stalls without a lock (it applies nothing)."""

    def __init__(self, settings: DaemonSettings, state: Path, fleet: str | None) -> None:
        self._settings = settings
        self._state = state
        self._fleet = fleet
        self._locks: LockService | None = None
        self._lock: FleetLock | None = None

    def take(self, *, timeout: float, stop: threading.Event) -> None:
        """Take the lock (``take_lock``: refuse naming the holder, or wait up to ``timeout``
        seconds); LockRefused when it is not ours."""
        if self._fleet is None:  # the repo stalls before this; a fence that never opens
            return
        try:
            self._locks = compose.lock_service(self._settings, self._state, role="apply")
        except ConfigError as exc:
            config_error(exc)
            raise LockRefused from exc
        self._lock = self._locks.lock(self._fleet)
        if not take_lock(self._lock, timeout=timeout, stop=stop):
            raise LockRefused

    def held(self) -> bool:
        """The fence of every mutating call: the lock is ours and still held."""
        lock = self._lock
        return lock is not None and lock.held()

    def close(self) -> None:
        if self._locks is not None:
            self._locks.close()
