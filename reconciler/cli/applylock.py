"""The fleet lock of one ``proxyfleet apply`` (the daemon's lock, docs/operations.md)."""

from __future__ import annotations

import threading
from pathlib import Path

from reconciler.adapters.coordination.fleetlock import FleetLock, LockService
from reconciler.cli.common import config_error, lock_service, take_lock
from reconciler.errors import ConfigError
from reconciler.model.settings import DaemonSettings


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

    def take(self, *, wait: bool, stop: threading.Event) -> None:
        """Take the lock (``take_lock``: refuse naming the holder, or wait with ``wait``);
        LockRefused when it is not ours."""
        if self._fleet is None:  # the repo stalls before this; a fence that never opens
            return
        try:
            self._locks = lock_service(self._settings, self._state, role="apply")
        except ConfigError as exc:
            config_error(exc)
            raise LockRefused from exc
        self._lock = self._locks.lock(self._fleet)
        if not take_lock(self._lock, wait=wait, stop=stop):
            raise LockRefused

    def held(self) -> bool:
        """The fence of every mutating call: the lock is ours and still held."""
        lock = self._lock
        return lock is not None and lock.held()

    def close(self) -> None:
        if self._locks is not None:
            self._locks.close()
