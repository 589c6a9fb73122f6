"""``FakeRing``: an in-memory FleetRing for unit tests (and nothing else).

Like ``ToozRing`` it answers from its last ``refresh``: before the first one a fleet
has no owner and no members. Several fake rings over one ``FakeRingBackend`` are
daemons sharing a coordination service: ``refresh`` joins this ring's fleets' groups
and reads their members, ``close`` leaves them. The owner of a fleet is one of its
members, the same for every ring that read the same members (a hash over the fleet
id, as tooz's hash ring is; not the same member tooz would pick).

The test may say who owns what instead: ``ring.owners["home"] = "box-b"`` moves a
fleet at the next refresh (that owner counts as a member), and ``ring.down = True``
makes ``refresh`` fail as an unreachable service does, the last view kept.
The contract it shares with ``ToozRing``: tests/test_ring_contract.py.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

from reconciler.errors import CoordinationError


class FakeRingBackend:
    """The coordination service fake rings share: the members of each fleet's group."""

    def __init__(self) -> None:
        self.groups: dict[str, set[str]] = {}


class FakeRing:
    def __init__(
        self,
        member: str,
        owners: dict[str, str] | None = None,
        *,
        fleets: Sequence[str] | None = None,
        backend: FakeRingBackend | None = None,
    ) -> None:
        self._member = member
        self.owners: dict[str, str] = dict(owners or {})
        self._fleets = tuple(fleets if fleets is not None else self.owners)
        self._backend = backend or FakeRingBackend()
        self.down = False
        self.refreshes = 0
        self.closed = False
        self._view: dict[str, tuple[str, ...]] = {}

    @property
    def member(self) -> str:
        return self._member

    def refresh(self) -> None:
        if self.down:
            raise CoordinationError("fake coordination service is down")
        self.refreshes += 1
        view: dict[str, tuple[str, ...]] = {}
        for fleet in self._fleets:
            group = self._backend.groups.setdefault(fleet, set())
            group.add(self._member)
            steered = self.owners.get(fleet)
            view[fleet] = tuple(sorted(group | ({steered} if steered else set())))
        self._view = view

    def owner(self, fleet: str) -> str | None:
        members = self._view.get(fleet)
        if not members:
            return None
        steered = self.owners.get(fleet)
        if steered in members:
            return steered
        return members[zlib.crc32(fleet.encode()) % len(members)]

    def members(self, fleet: str) -> tuple[str, ...]:
        return self._view.get(fleet, ())

    def close(self) -> None:
        for group in self._backend.groups.values():
            group.discard(self._member)
        self.closed = True
