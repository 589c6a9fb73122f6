"""``FakeLocks``: an in-memory LockService for unit tests (and nothing else).

Several ``FakeLocks`` built on one ``FakeLockBackend`` contend like processes
sharing a coordination service. The backend keeps the rules of the real one:
one holder per fleet, the holder's record names it, a lock taken by someone
else is refused rather than waited for unless ``wait`` says so.

Failure injection: ``backend.lose(fleet)`` takes the lock away from its
holder (a lease that expired, a partition), after which ``held()`` is False
for it; ``backend.down = True`` makes every call that needs the service raise
CoordinationError (held() still answers from what is known: a lock the
backend has not taken away stays held, as a lease does until it expires).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from datetime import datetime

from reconciler.adapters.coordination.fleetlock import utc_now
from reconciler.errors import CoordinationError
from reconciler.model.coordination import Holder
from reconciler.ports.locks import FleetLock


class FakeLockBackend:
    """The shared "coordination service": fleet -> (owner token, holder record)."""

    def __init__(self, *, clock: Callable[[], datetime] = utc_now) -> None:
        self.clock = clock
        self.down = False
        self._cond = threading.Condition()
        self.owners: dict[str, tuple[object, Holder]] = {}
        self.log: list[tuple[str, str, str]] = []
        """(event, fleet, holder) in order: acquired, released, lost."""

    def lose(self, fleet: str) -> None:
        """The holder's lease is gone: the lock is free for anyone else."""
        with self._cond:
            owner = self.owners.pop(fleet, None)
            if owner is not None:
                self.log.append(("lost", fleet, str(owner[1])))
            self._cond.notify_all()

    def _check(self) -> None:
        if self.down:
            raise CoordinationError("fake coordination service is down")


class FakeFleetLock:
    def __init__(
        self, backend: FakeLockBackend, fleet: str, me: Holder, *, poll: float = 0.01
    ) -> None:
        self._backend = backend
        self._fleet = fleet
        self._me = me
        self._token = object()
        self._poll = poll
        self._epoch = 0

    @property
    def fleet(self) -> str:
        return self._fleet

    @property
    def epoch(self) -> int:
        return self._epoch

    def acquire(self, *, wait: float = 0.0, stop: threading.Event | None = None) -> bool:
        backend = self._backend
        deadline = None if math.isinf(wait) else time.monotonic() + wait
        with backend._cond:
            while True:
                backend._check()
                owner = backend.owners.get(self._fleet)
                if owner is not None and owner[0] is self._token:
                    return True
                if owner is None:
                    holder = self._me.holding(backend.clock())
                    backend.owners[self._fleet] = (self._token, holder)
                    self._epoch += 1
                    backend.log.append(("acquired", self._fleet, str(holder)))
                    return True
                if stop is not None and stop.is_set():
                    return False
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                backend._cond.wait(self._poll)

    def held(self) -> bool:
        owner = self._backend.owners.get(self._fleet)
        return owner is not None and owner[0] is self._token

    def release(self) -> None:
        backend = self._backend
        with backend._cond:
            owner = backend.owners.get(self._fleet)
            if owner is not None and owner[0] is self._token:
                backend._check()
                del backend.owners[self._fleet]
                backend.log.append(("released", self._fleet, str(owner[1])))
                backend._cond.notify_all()

    def holder(self) -> Holder | None:
        if self._backend.down:
            return None
        owner = self._backend.owners.get(self._fleet)
        return owner[1] if owner is not None else None


class FakeLocks:
    """One process's LockService over a shared FakeLockBackend."""

    def __init__(self, backend: FakeLockBackend, me: Holder, *, ttl: float = 30.0) -> None:
        self.backend = backend
        self.me = me
        self._ttl = ttl
        self._locks: dict[str, FakeFleetLock] = {}
        self.closed = False

    @property
    def ttl(self) -> float:
        return self._ttl

    def lock(self, fleet: str) -> FleetLock:
        if fleet not in self._locks:
            self._locks[fleet] = FakeFleetLock(self.backend, fleet, self.me)
        return self._locks[fleet]

    def close(self) -> None:
        for lock in self._locks.values():
            lock.release()
        self.closed = True
