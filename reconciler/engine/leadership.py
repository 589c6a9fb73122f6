"""Leader or standby: which daemon of a fleet acts.

Every daemon configured for a fleet runs the same loop. Each cycle fetches
the repo, learns the fleet id from it and ``claim``s the fleet's lock: the
one that gets it leads (observes, plans, acts, writes status), the others
stand by and touch no host. A watcher thread (``watch``) keeps asking, every
``poll`` seconds: a leader notices a lost lock within one poll (its hosts are
fenced by then anyway, engine.fencing), a standby tries to take the lock and,
once it has it, asks for a run at once, so that a leader that died is
replaced within the lock's TTL plus one poll.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from reconciler.adapters.coordination.fleetlock import FleetLock, LockService
from reconciler.core.load.manifests import load_repo
from reconciler.errors import CoordinationError, InvalidInput

log = logging.getLogger(__name__)

HOLDER_REFRESH = 10.0
"""Seconds between looks at who holds the lock while standing by (one round trip each)."""


def fleet_id(root: Path) -> str | None:
    """The fleet id (the lock's name) of the repo at ``root``; None when the repo does not load.

    A repo that does not load is never acted on, so it needs no lock.
    """
    try:
        return load_repo(root).fleet.name
    except InvalidInput:
        return None


class Leadership:
    """This daemon's standing in its fleet. Thread-safe; see the module docstring."""

    def __init__(
        self,
        locks: LockService,
        *,
        poll: float,
        on_change: Callable[[str, bool], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._locks = locks
        self.poll = poll
        self._on_change = on_change
        self._monotonic = monotonic
        self._mu = threading.Lock()
        self._lock: FleetLock | None = None
        self._epoch = -1
        """The lock's epoch when the running (or last) cycle claimed it: the fence's."""
        self._leading = False
        self._holder = "unknown"
        self._holder_at = -HOLDER_REFRESH
        self._trouble = ""
        self._announced: set[str] = set()
        self._listeners: list[Callable[[str, bool], object]] = []

    @property
    def fleet(self) -> str | None:
        lock = self._lock
        return lock.fleet if lock is not None else None

    @property
    def leading(self) -> bool:
        return self._leading

    def held(self) -> bool:
        """The fence's question: has this process held its fleet's lock without a break since
        the running cycle claimed it? No I/O. A lock lost and taken back by the watcher in
        the middle of a cycle does not count: that cycle planned under the old one."""
        lock = self._lock
        return lock is not None and lock.held() and lock.epoch == self._epoch

    def claim(self, fleet: str) -> bool:
        """Lead ``fleet`` if its lock is ours or can be had now; False: stand by."""
        with self._mu:
            old = self._lock
            if old is not None and old.fleet != fleet:
                log.info(
                    "The fleet id changed from %s to %s; giving up the old lock.", old.fleet, fleet
                )
                old.release()
                self._set(old, False)
            lock = self._lock = self._locks.lock(fleet)
        self._try(lock)
        self._epoch = lock.epoch
        return self._leading

    def check(self) -> bool:
        """One watcher step; True when this daemon just became the leader."""
        lock = self._lock
        if lock is None:
            return False
        if self._leading:
            if not lock.held():
                log.error("No longer the leader of fleet %s: its lock was lost.", lock.fleet)
                self._set(lock, False)
            return False
        return self._try(lock)

    def watch(self, stop: threading.Event, on_gained: Callable[[], None]) -> threading.Thread:
        """Run ``check`` every ``poll`` seconds until ``stop``; ``on_gained`` on taking over."""

        def loop() -> None:
            while not stop.wait(self.poll):
                if self.check():
                    on_gained()

        thread = threading.Thread(target=loop, name="leadership", daemon=True)
        thread.start()
        return thread

    def listen(self, callback: Callable[[str, bool], object]) -> None:
        """Also call ``callback(fleet, leading)`` on every change (after ``on_change``)."""
        self._listeners.append(callback)

    def describe(self) -> str:
        """One line for /healthz and systemd's STATUS."""
        lock = self._lock
        if lock is None:
            return "no fleet known yet (the repo has not loaded)"
        if self._leading:
            return f"leader of fleet {lock.fleet}"
        trouble = f"; {self._trouble}" if self._trouble else ""
        return f"standby for fleet {lock.fleet}, led by {self._holder}{trouble}"

    def close(self) -> None:
        """Give the lock back so that a standby takes over at once (a clean shutdown)."""
        lock = self._lock
        if lock is not None:
            try:
                lock.release()
            except CoordinationError as exc:
                log.warning("Could not release the lock of fleet %s: %s", lock.fleet, exc)
            self._set(lock, False)

    # -- internals ---------------------------------------------------------------

    def _try(self, lock: FleetLock) -> bool:
        """Try to take ``lock`` now; True when that made this daemon the leader."""
        try:
            got = lock.acquire()
            self._trouble = ""
        except CoordinationError as exc:
            if self._trouble != str(exc):
                log.warning("Cannot reach the coordination service: %s. Not acting.", exc)
            self._trouble = str(exc)
            got = False
        gained = got and not self._leading
        self._set(lock, got)
        if not got and self._monotonic() - self._holder_at >= HOLDER_REFRESH:
            holder = lock.holder()
            self._holder = str(holder) if holder is not None else "unknown"
            self._holder_at = self._monotonic()
        return gained

    def _set(self, lock: FleetLock, leading: bool) -> None:
        if leading == self._leading and lock.fleet in self._announced:
            return
        self._announced.add(lock.fleet)
        self._leading = leading
        if leading:
            log.info("Leading fleet %s now.", lock.fleet)
        else:
            log.info("Standing by for fleet %s.", lock.fleet)
            holder = lock.holder()
            self._holder = str(holder) if holder is not None else "unknown"
            self._holder_at = self._monotonic()
        for callback in [*([self._on_change] if self._on_change else []), *self._listeners]:
            callback(lock.fleet, leading)
