"""The DNS seam: the proxies' names, published after each run.

Real: ``Rfc2136Publisher`` (reconciler.adapters.dns.rfc2136). Fake: ``FakePublisher``
(reconciler.adapters.dns.fakepublisher), a zone in memory. Contract:
tests/integration/test_dns_contract.py (a real BIND).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from reconciler.core.endpoints.records import Member
from reconciler.model.report import DnsOutcome


class EndpointPublisher(Protocol):
    def publish(self, fleet: str, members: Sequence[Member]) -> DnsOutcome:
        """Make the server hold the names ``members`` imply for ``fleet``. Never raises for
        the server's or the network's failures (they are a FAILED outcome). Cost: one
        zone transfer and at most one update, each bounded by the adapter's timeout."""
        ...
