"""The fleet ring seam: which of the daemons sharing a coordination service serves which fleet.

A daemon that lists several fleets joins, for each of them, a group of the daemons
that list it; a consistent hash ring over each group's members gives every fleet one
*owner*. The ring only spreads the work: a daemon acts on a fleet when the ring gives
it the fleet **and** it holds the fleet's lock (reconciler.ports.locks), and it
is the lock that makes one actor per fleet; two daemons that briefly disagree about
the ring (each saw a join or a leave at a different poll) either both try the lock, and
one gets it, or both leave the fleet alone for a poll.

Real: ``ToozRing`` (reconciler.adapters.coordination.toozring), over tooz's partitioned
groups. Fake: ``FakeRing`` (reconciler.adapters.coordination.fakering), in memory,
several over one ``FakeRingBackend``. Contract: tests/test_ring_contract.py (fake and
the file backend) and tests/integration/test_ring_contract_etcd.py (a real etcd).
"""

from __future__ import annotations

from typing import Protocol


class FleetRing(Protocol):
    """This daemon's view of the ring. ``owner`` and ``members`` answer from the last
    ``refresh`` (no I/O), so the leadership watcher can ask them every poll."""

    @property
    def member(self) -> str:
        """This daemon's name on the ring (``coordination.member``, else the host name)."""
        ...

    def refresh(self) -> None:
        """Renew this daemon's membership (joining again if it lapsed) and read every
        fleet's members. Raises CoordinationError when the service cannot answer; the
        last view stays. Cost: 1 round trip plus 1 per fleet (a few more on a change)."""
        ...

    def owner(self, fleet: str) -> str | None:
        """The member the ring gives ``fleet`` to; None before the first good refresh."""
        ...

    def members(self, fleet: str) -> tuple[str, ...]:
        """The members of ``fleet``'s group at the last refresh, sorted."""
        ...

    def close(self) -> None:
        """Leave every group (the others rebalance at their next refresh) and disconnect."""
        ...
