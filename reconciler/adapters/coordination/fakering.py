"""``FakeRing``: an in-memory FleetRing for unit tests (and nothing else).

The test says who owns what: ``ring.owners["home"] = "box-b"`` moves a fleet,
``ring.down = True`` makes ``refresh`` fail as an unreachable service does.
"""

from __future__ import annotations

from reconciler.errors import CoordinationError


class FakeRing:
    def __init__(self, member: str, owners: dict[str, str] | None = None) -> None:
        self._member = member
        self.owners: dict[str, str] = dict(owners or {})
        self.down = False
        self.refreshes = 0
        self.closed = False

    @property
    def member(self) -> str:
        return self._member

    def refresh(self) -> None:
        if self.down:
            raise CoordinationError("fake coordination service is down")
        self.refreshes += 1

    def owner(self, fleet: str) -> str | None:
        return self.owners.get(fleet)

    def members(self, fleet: str) -> tuple[str, ...]:
        return tuple(sorted({self._member, *self.owners.values()}))

    def close(self) -> None:
        self.closed = True
