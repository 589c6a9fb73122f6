"""The daemon is built from its parts: their fakes, no socket, no Prometheus, no systemd."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

from daemonutil import FakeCycle, running, wait_until

from reconciler.adapters.git.statuswriter import MemoryStatusSink
from reconciler.adapters.surface.fakemetrics import FakeMetrics
from reconciler.adapters.surface.fakenotifier import FakeNotifier
from reconciler.adapters.surface.fakesurface import FakeSurface
from reconciler.engine.daemon import Daemon
from reconciler.engine.parts import DaemonParts
from reconciler.engine.runtime import Runtime
from reconciler.model.report import RunResult
from reconciler.model.settings import DaemonSettings, ListenSettings
from reconciler.ports.surface import Endpoints


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
        assert b'proxyfleet_reconcile_runs_total{result="success"} 1.0' in (
            endpoint.endpoints.metrics()
        )
        assert endpoint.endpoints.metrics_content_type == metrics.content_type
        assert endpoint.endpoints.health()[0] is True
        endpoint.endpoints.hook()
        assert wait_until(lambda: len(daemon.reports) == 2)

    assert surfaces[0].events == ["start", "stop"]
    assert [r.result for r in metrics.reports] == [RunResult.SUCCESS, RunResult.SUCCESS]
    assert len(status.reports) == 2
    assert notifier.sent[0] == "READY=1\nSTATUS=Starting; first reconcile now"
    assert any(line.startswith("STATUS=success at") for line in notifier.sent)
    assert notifier.sent[-1] == "STOPPING=1\nSTATUS=Stopping"
    assert metrics.failed == []
