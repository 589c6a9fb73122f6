"""Leader or standby: which daemon of a fleet acts.

Every daemon configured for a fleet runs the same loop. Each cycle fetches
the repo, learns the fleet id from it and ``claim``s the fleet's lock: the
one that gets it leads (observes, plans, acts, writes status), the others
stand by and touch no host. A watcher thread (``watch``) keeps asking, every
``poll`` seconds: a leader notices a lost lock within one poll (its hosts are
fenced by then anyway, engine.fencing), a standby tries to take the lock and,
once it has it, asks for a run at once, so that a leader that died is
replaced within the lock's TTL plus one poll.

With a fleet ring (several fleets spread over several daemons,
reconciler.ports.ring), each poll first asks whether the ring gives the fleet to
this daemon and follows the step reconciler.core.assignment names: a daemon
takes the lock only of a fleet assigned to it, and hands over one that is
assigned elsewhere (fence closed, calls in flight awaited, lock released), so
that the new owner takes it at its next poll.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from reconciler.core.assignment import Step, owned, step
from reconciler.engine.fencing import Fence
from reconciler.errors import CoordinationError, InvalidInput
from reconciler.ports.locks import FleetLock, LockService
from reconciler.ports.repoloader import RepoLoader
from reconciler.ports.ring import FleetRing

log = logging.getLogger(__name__)

HOLDER_REFRESH = 10.0
"""Seconds between looks at who holds the lock while standing by (one round trip each)."""


def fleet_id(root: Path, load: RepoLoader) -> str | None:
    """The fleet id (the lock's name) of the repo at ``root`` as ``load`` reads it; None when
    the repo does not load.

    A repo that does not load is never acted on, so it needs no lock.
    """
    try:
        return load(root).fleet.name
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
        fleet: str | None = None,
        ring: FleetRing | None = None,
        drain: float = 60.0,
    ) -> None:
        """``fleet``: the fleet id when the config pins it (known before the first fetch).
        ``ring``: the fleet ring, when this daemon serves several fleets; None: every
        fleet counts as assigned here (one fleet, plain active/standby). ``drain``: the
        most seconds a hand-over waits for mutating calls in flight."""
        self._locks = locks
        self.poll = poll
        self._on_change = on_change
        self._monotonic = monotonic
        self._ring = ring
        self._drain = drain
        self.fence = Fence(self._held)
        """The gate of every mutating host call of this fleet (engine.fencing)."""
        self._mu = threading.Lock()
        self._lock: FleetLock | None = locks.lock(fleet) if fleet is not None else None
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
        """Leading and acting; False from the moment a hand-over closes the fence, before the
        lock is released, so that this daemon and the next owner never both say they lead."""
        return self._leading and not self.fence.closed

    def held(self) -> bool:
        """The fence's question: has this process held its fleet's lock without a break since
        the running cycle claimed it? No I/O. A lock lost and taken back by the watcher in
        the middle of a cycle does not count: that cycle planned under the old one; nor
        does one being handed over to the fleet's new owner."""
        return self.fence.held()

    def _held(self) -> bool:
        lock = self._lock
        return lock is not None and lock.held() and lock.epoch == self._epoch

    def assigned(self, fleet: str) -> bool:
        """True when the ring gives ``fleet`` to this daemon (always, without a ring)."""
        ring = self._ring
        return ring is None or owned(ring.owner(fleet), ring.member)

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
        if self.assigned(fleet):
            self._try(lock)
        elif self._leading:
            self._hand_over(lock)
        else:
            self._set(lock, False)
        self._epoch = lock.epoch
        return self.leading

    def check(self) -> bool:
        """One watcher step; True when this daemon just became the leader."""
        lock = self._lock
        if lock is None:
            return False
        what = step(assigned=self.assigned(lock.fleet), leading=self._leading)
        if what is Step.KEEP and not lock.held():
            log.error("No longer the leader of fleet %s: its lock was lost.", lock.fleet)
            self._set(lock, False)
        elif what is Step.YIELD:
            self._hand_over(lock)
        elif what is Step.TAKE:
            return self._try(lock)
        elif what is Step.WAIT and self._monotonic() - self._holder_at >= HOLDER_REFRESH:
            self._look_at_holder(lock)
        return False

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
        if self.leading:
            return f"leader of fleet {lock.fleet}"
        trouble = f"; {self._trouble}" if self._trouble else ""
        ring = self._ring
        if ring is not None and not self.assigned(lock.fleet):
            owner = ring.owner(lock.fleet) or "nobody yet (the ring has not been read)"
            return (
                f"standby for fleet {lock.fleet}, assigned to {owner} "
                f"(ring of {len(ring.members(lock.fleet))}), led by {self._holder}{trouble}"
            )
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

    def _hand_over(self, lock: FleetLock) -> None:
        """The ring gave the fleet to another daemon: stop acting, then let the lock go."""
        ring = self._ring
        owner = ring.owner(lock.fleet) if ring is not None else None
        log.info("Fleet %s is assigned to %s now; handing it over.", lock.fleet, owner)
        if not self.fence.close(self._drain):
            log.warning(
                "A host call of fleet %s is still running after %.0f s; releasing its lock "
                "anyway (the next owner's plan completes or cleans up what it leaves).",
                lock.fleet,
                self._drain,
            )
        try:
            lock.release()
        except CoordinationError as exc:  # the lease runs out on its own
            log.warning("Could not release the lock of fleet %s: %s", lock.fleet, exc)
        self._set(lock, False)

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
        if gained:
            self.fence.open()
        self._set(lock, got)
        if not got and self._monotonic() - self._holder_at >= HOLDER_REFRESH:
            self._look_at_holder(lock)
        return gained

    def _look_at_holder(self, lock: FleetLock) -> None:
        holder = lock.holder()
        self._holder = str(holder) if holder is not None else "unknown"
        self._holder_at = self._monotonic()

    def _set(self, lock: FleetLock, leading: bool) -> None:
        if leading == self._leading and lock.fleet in self._announced:
            return
        self._announced.add(lock.fleet)
        self._leading = leading
        if leading:
            log.info("Leading fleet %s now.", lock.fleet)
        else:
            log.info("Standing by for fleet %s.", lock.fleet)
            self._look_at_holder(lock)
        for callback in [*([self._on_change] if self._on_change else []), *self._listeners]:
            callback(lock.fleet, leading)
