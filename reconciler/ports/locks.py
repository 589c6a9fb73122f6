"""The fleet lock seam: one actor per fleet, whoever and wherever it runs.

Every path that mutates a fleet (a daemon cycle, ``proxyfleet apply``) holds the fleet's
lock first. Real: ``ToozLocks`` (reconciler.adapters.coordination.toozlock), over tooz: a
file lock in the state dir by default, etcd or ZooKeeper for several management boxes.
Fake: ``FakeLocks`` (reconciler.adapters.coordination.fakelock), in memory. Who holds a
lock is a model value (``Holder``, reconciler.model.coordination). Contract:
tests/test_lock_contract.py (the file lock) and tests/integration/test_lock_contract_etcd.py.

Costs are noted per method: "round trips" are requests to the coordination
service (none for the file backend, which is a local ``flock``).
"""

from __future__ import annotations

import threading
from typing import Protocol

from reconciler.model.coordination import Holder


class FleetLock(Protocol):
    """The lock of one fleet, as one process sees it. Safe to call from several threads."""

    @property
    def fleet(self) -> str:
        """The fleet id (``metadata.name`` of its Fleet) this lock guards."""
        ...

    def acquire(self, *, wait: float = 0.0, stop: threading.Event | None = None) -> bool:
        """Take the lock. True once it is ours (or already was); False when another holds it.

        ``wait`` is how many seconds to keep trying (``math.inf``: until it is
        free or ``stop`` is set). Raises CoordinationError when the backend
        cannot answer. Cost: 1-3 round trips per try; a try every poll interval.
        """
        ...

    def held(self) -> bool:
        """True while the lock is ours and its lease is known to be alive. No I/O.

        The fence asks this before every mutating host call, so it reads
        state that the heartbeat keeps: for a lease-based backend it turns
        False once the last renewal is older than the TTL minus a safety
        margin, before the coordination service can let anyone else in.
        """
        ...

    @property
    def epoch(self) -> int:
        """How many times this process has taken the lock (0: never). No I/O.

        A lock lost and taken again is a new epoch: whoever planned under the old
        one must not act under the new one (another actor may have acted between).
        """
        ...

    def release(self) -> None:
        """Give the lock back (no error when it is not held). Cost: 1-2 round trips."""
        ...

    def holder(self) -> Holder | None:
        """Who holds the lock now, as recorded by the holder; None if nobody or unknown.

        Never raises: an unreachable backend is "unknown". Cost: 1 round trip.
        """
        ...


class LockService(Protocol):
    """Hands out the lock of any fleet; one per process."""

    @property
    def ttl(self) -> float:
        """Seconds a lease outlives its holder's last renewal (inf for the file backend)."""
        ...

    def lock(self, fleet: str) -> FleetLock:
        """The lock of ``fleet`` (not taken yet). The same object for the same fleet."""
        ...

    def close(self) -> None:
        """Release every lock and disconnect."""
        ...
