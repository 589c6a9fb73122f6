"""The probe seam: one request through a proxy, as its manifest's ``health`` describes.

Real: ``HttpProber`` (reconciler.adapters.surface.probe). Fake: ``FakeProber`` (same
module), answers set by the test. Contract: tests/test_prober_contract.py.
"""

from __future__ import annotations

from typing import Protocol

from reconciler.model import fleet


class ProbeOutcome(Protocol):
    """What a probe says: healthy or not, and why in one sentence."""

    @property
    def healthy(self) -> bool: ...

    @property
    def detail(self) -> str: ...


class Prober(Protocol):
    """Sends one request through the proxy at ``ip`` as ``health`` describes."""

    def probe(self, ip: str, health: fleet.HealthCheck) -> ProbeOutcome:
        """Never raises for network failures. Cost: one TCP connection, at most
        ``health.timeout_seconds`` in all."""
        ...
