"""What the daemon is made of besides its cycle: small seams, wired by the CLI, faked by tests.

``Daemon`` takes a ``DaemonParts``: the metrics sink, the HTTP surface (built
from the routes the daemon answers), the service manager notifier, the status
sink and the fleet's leadership. The real ones are ``Metrics``, ``HttpApi``,
``SdNotify``, ``GitStatusWriter`` (reconciler.adapters.surface / .git) and
``Leadership``; ``reconciler.cli.daemon`` wires them. Time, chance, the stop
flag and the engine's progress come through ``Runtime``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from reconciler.adapters.git.statuswriter import StatusSink
from reconciler.adapters.surface.httpapi import Endpoints
from reconciler.engine.leadership import Leadership
from reconciler.model.report import RunReport


class MetricsSink(Protocol):
    """Where each cycle's figures go, and what ``GET /metrics`` serves."""

    @property
    def content_type(self) -> str:
        """The media type of ``exposition``."""
        ...

    def record(self, report: RunReport) -> None:
        """Once per cycle, with its report."""
        ...

    def report_failed(self, stage: str) -> None:
        """Count a failure to record (``metrics``) or publish (``status``) a report."""
        ...

    def exposition(self) -> bytes:
        """The current figures, as ``content_type``."""
        ...


class Surface(Protocol):
    """The daemon's listener: serving from ``start`` until ``stop``."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


SurfaceFactory = Callable[[Endpoints], Surface]
"""Builds the listener for the routes the daemon answers (it owns health and the hook)."""


class Notifier(Protocol):
    """The service manager (systemd's sd_notify): readiness, status text, the watchdog.
    Every call returns whether it was delivered; none raises."""

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between watchdog pings; None: no watchdog."""
        ...

    def ready(self, status: str = "") -> bool: ...

    def status(self, text: str) -> bool: ...

    def watchdog(self) -> bool: ...

    def stopping(self, status: str = "") -> bool: ...


@dataclass(frozen=True, slots=True)
class DaemonParts:
    metrics: MetricsSink
    surface: SurfaceFactory
    notifier: Notifier
    status: StatusSink | None = None
    """None: the status is not written back."""
    leadership: Leadership | None = None
    """Who acts for the fleet; None: this daemon always acts (no lock, tests)."""
