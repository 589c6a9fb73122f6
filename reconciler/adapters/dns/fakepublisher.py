"""An in-memory zone behind the ``EndpointPublisher`` seam: the engine's unit tests' DNS
server. It takes the changes the core decides (``changes.decide``) as the RFC 2136
adapter sends them, and fails as a server would when told to (``failure``). Used by
tests only; the real thing is tested against a real BIND (tests/integration)."""

from __future__ import annotations

from collections.abc import Sequence

from reconciler.core.endpoints.changes import Present, decide
from reconciler.core.endpoints.records import Member, registry_text
from reconciler.model.report import DnsOutcome, DnsResult
from reconciler.model.settings import DnsPolicy


class FakePublisher:
    def __init__(self, *, policy: DnsPolicy = DnsPolicy.SYNC) -> None:
        self.policy = policy
        self.names: dict[str, Present] = {}
        """The zone: relative name -> what it holds."""
        self.failure: DnsOutcome | None = None
        """Set: every publish answers this and changes nothing (a server down or refusing)."""
        self.calls: list[tuple[str, tuple[Member, ...]]] = []

    def publish(self, fleet: str, members: Sequence[Member]) -> DnsOutcome:
        self.calls.append((fleet, tuple(members)))
        if self.failure is not None:
            return self.failure
        present = [self.names[name] for name in sorted(self.names)]
        found = decide(members, present, fleet=fleet, policy=self.policy)
        for change in found.changes:
            if change.after is None:
                del self.names[change.name]
            else:
                after = change.after
                txt = (registry_text(fleet),)
                self.names[change.name] = Present(after.name, after.ipv4, after.ipv6, txt)
        result = DnsResult.PUBLISHED if found.changes else DnsResult.UNCHANGED
        return DnsOutcome(
            result, records=found.owned, changes=len(found.changes), conflicts=found.conflicts
        )

    def addresses(self, name: str) -> tuple[str, ...]:
        """What ``name`` resolves to (A and AAAA), as a client would get it."""
        held = self.names.get(name)
        return () if held is None else (*held.a, *held.aaaa)
