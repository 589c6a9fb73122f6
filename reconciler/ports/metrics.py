"""The metrics seam: each cycle's figures, and what ``GET /metrics`` serves.

Real: ``Metrics`` (one fleet) and ``FleetMetrics`` (several, as one exposition)
(reconciler.adapters.surface.metrics), over prometheus_client. Fake: ``FakeMetrics``
(reconciler.adapters.surface.fakemetrics), which keeps what it was given and serves the
runs and report errors under ``Metrics``'s names; tests of the series themselves use
``Metrics``, which serves from memory. Contract: tests/test_metrics_contract.py
(``FakeMetrics`` and ``Metrics``; ``FleetMetrics`` serves ``Metrics``'s series labelled
by fleet and has no fake).
"""

from __future__ import annotations

from typing import Protocol

from reconciler.model.report import RunReport


class Exposition(Protocol):
    """What ``GET /metrics`` serves."""

    @property
    def content_type(self) -> str:
        """The media type of ``exposition``."""
        ...

    def exposition(self) -> bytes:
        """The current figures, as ``content_type``."""
        ...


class MetricsSink(Exposition, Protocol):
    """Where each cycle's figures go, and what ``GET /metrics`` serves."""

    def record(self, report: RunReport) -> None:
        """Once per cycle, with its report."""
        ...

    def report_failed(self, stage: str) -> None:
        """Count a failure to record (``metrics``) or publish (``status``) a report."""
        ...


class DaemonMetrics(MetricsSink, Protocol):
    """One fleet's metrics in the daemon: the sink, and the hooks its other parts are given.

    The composition root (reconciler.cli.compose) builds them (``metrics``) and serves
    several fleets' as one exposition (``fleet_metrics``)."""

    def observe_rpc(self, rpc: str, host: str, seconds: float, ok: bool = True) -> None:
        """Time one libvirt call (the host adapter's call observer)."""
        ...

    def leading(self, fleet: str, leading: bool) -> None:
        """Whether this daemon leads ``fleet`` now (the leadership's change hook)."""
        ...

    def source_result(self, *, ok: bool) -> None:
        """Whether the last fetch of the fleet repo worked."""
        ...
