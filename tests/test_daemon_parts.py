"""The daemon is built from its parts: fakes here, no socket, no Prometheus, no systemd."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime

from daemonutil import FakeCycle, running, wait_until

from reconciler.adapters.git.statuswriter import MemoryStatusSink
from reconciler.engine.daemon import Daemon
from reconciler.engine.parts import DaemonParts
from reconciler.engine.runtime import Runtime
from reconciler.model.report import RunReport, RunResult
from reconciler.model.settings import DaemonSettings, ListenSettings
from reconciler.ports.surface import Endpoints


@dataclass
class FakeSurface:
    endpoints: Endpoints
    events: list[str] = field(default_factory=list)

    def start(self) -> None:
        self.events.append("start")

    def stop(self) -> None:
        self.events.append("stop")


@dataclass
class FakeMetrics:
    reports: list[RunReport] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    content_type: str = "text/plain"

    def record(self, report: RunReport) -> None:
        self.reports.append(report)

    def report_failed(self, stage: str) -> None:
        self.failed.append(stage)

    def exposition(self) -> bytes:
        return f"runs {len(self.reports)}\n".encode()


@dataclass
class FakeNotifier:
    sent: list[str] = field(default_factory=list)
    watchdog_interval: float | None = None

    def ready(self, status: str = "") -> bool:
        self.sent.append(f"ready {status}")
        return True

    def status(self, text: str) -> bool:
        self.sent.append(f"status {text}")
        return True

    def watchdog(self) -> bool:
        self.sent.append("watchdog")
        return True

    def stopping(self, status: str = "") -> bool:
        self.sent.append(f"stopping {status}")
        return True


def test_a_daemon_built_from_fake_parts_runs_a_cycle_and_reports_through_each_part() -> None:
    surfaces: list[FakeSurface] = []

    def surface(endpoints: Endpoints) -> FakeSurface:
        surfaces.append(FakeSurface(endpoints))
        return surfaces[-1]

    metrics, notifier, status = FakeMetrics(), FakeNotifier(), MemoryStatusSink()
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    stop = threading.Event()
    runtime = Runtime(clock=lambda: at, stop=stop, sleep=stop.wait)
    # A port no test could bind twice: a fake surface never listens.
    settings = DaemonSettings(interval=3600, listen=ListenSettings("127.0.0.1", 1))
    parts = DaemonParts(metrics=metrics, surface=surface, notifier=notifier, status=status)
    daemon = Daemon(settings, FakeCycle(), parts, runtime=runtime, handle_signals=False)

    with running(daemon):
        assert wait_until(lambda: len(daemon.reports) == 1)
        (endpoint,) = surfaces
        assert endpoint.events == ["start"]
        assert endpoint.endpoints.metrics() == b"runs 1\n"
        assert endpoint.endpoints.metrics_content_type == "text/plain"
        assert endpoint.endpoints.health()[0] is True
        endpoint.endpoints.hook()
        assert wait_until(lambda: len(daemon.reports) == 2)

    assert surfaces[0].events == ["start", "stop"]
    assert [r.result for r in metrics.reports] == [RunResult.SUCCESS, RunResult.SUCCESS]
    assert len(status.reports) == 2
    assert notifier.sent[0] == "ready Starting; first reconcile now"
    assert any(line.startswith("status success at") for line in notifier.sent)
    assert notifier.sent[-1] == "stopping Stopping"
    assert metrics.failed == []
