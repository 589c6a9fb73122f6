"""Two daemons for one fleet (in threads, on the fake lock service): one leads, one stands by."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from daemonutil import http, real_daemon, running, wait_until
from enginefakes import FLEET, HOST, PROXY
from reports import report

from reconciler.adapters.coordination.fakelock import FakeLockBackend, FakeLocks
from reconciler.adapters.git.fakesource import FakeSource
from reconciler.adapters.git.statuswriter import MemoryStatusSink
from reconciler.adapters.surface.metrics import Metrics
from reconciler.adapters.surface.notify import SdNotify
from reconciler.cli import compose
from reconciler.engine.daemon import Daemon, source_cycle
from reconciler.engine.leadership import Leadership
from reconciler.model.coordination import Holder
from reconciler.model.report import RunReport
from reconciler.model.settings import DaemonSettings, ListenSettings


class RecordingNotify(SdNotify):
    def __init__(self) -> None:
        super().__init__({})
        self.lines: list[str] = []

    def send(self, *lines: str) -> bool:
        self.lines.extend(lines)
        return True


@dataclass
class Box:
    daemon: Daemon
    leadership: Leadership
    reconciles: list[str]
    status: MemoryStatusSink
    notify: RecordingNotify


def box(name: str, backend: FakeLockBackend, repo: Path) -> Box:
    metrics = Metrics()
    leadership = Leadership(
        FakeLocks(backend, Holder(name, 100, "daemon")), poll=0.05, on_change=metrics.leading
    )
    reconciles: list[str] = []

    def reconcile(root: Path, revision: str) -> RunReport:
        reconciles.append(revision)
        return report(revision=revision)

    status = MemoryStatusSink()
    notify = RecordingNotify()
    daemon = real_daemon(
        DaemonSettings(interval=3600, listen=ListenSettings("127.0.0.1", 0)),
        source_cycle(FakeSource(repo), reconcile, leadership=leadership, fleet_of=compose.fleet_of),
        metrics=metrics,
        status=status,
        notifier=notify,
        handle_signals=False,
        leadership=leadership,
    )
    return Box(daemon, leadership, reconciles, status, notify)


def fleet_repo(root: Path) -> Path:
    (root / "fleet.yaml").write_text(FLEET.replace("HOSTS\n", HOST.replace("NAME", "kvm01")))
    (root / "proxies.yaml").write_text(PROXY.replace("NAME", "web-1"))
    return root


def leader_metric(b: Box) -> str:
    text = http(b.daemon, "/metrics")[1].decode()
    return next(line for line in text.splitlines() if line.startswith("proxyfleet_leader{"))


def test_only_the_leader_reconciles_and_writes_status_and_the_standby_says_so(
    tmp_path: Path,
) -> None:
    backend = FakeLockBackend()
    repo = fleet_repo(tmp_path)
    a = box("box-a", backend, repo)
    with running(a.daemon):
        assert wait_until(lambda: len(a.reconciles) == 1)
        b = box("box-b", backend, repo)
        with running(b.daemon):
            assert wait_until(lambda: b.leadership.fleet == "home")
            a.daemon.triggers.fire("webhook")
            b.daemon.triggers.fire("webhook")
            assert wait_until(lambda: len(a.reconciles) == 2)
            assert wait_until(lambda: "Standby" in " ".join(b.notify.lines))

            status, body = http(b.daemon, "/healthz")
            assert status == 200
            assert body.startswith(b"standby: standby for fleet home, led by daemon on box-a")
            assert http(a.daemon, "/healthz")[1].startswith(b"ok: leader of fleet home")
            assert leader_metric(a) == 'proxyfleet_leader{fleet="home"} 1.0'
            assert leader_metric(b) == 'proxyfleet_leader{fleet="home"} 0.0'
            assert b.reconciles == [] and b.status.documents == []
            assert len(a.status.documents) >= 1
            assert any(
                line.startswith("STATUS=Standby: standby for fleet home") for line in b.notify.lines
            )


def test_when_the_leader_stops_the_standby_takes_over_and_reconciles_at_once(
    tmp_path: Path,
) -> None:
    backend = FakeLockBackend()
    repo = fleet_repo(tmp_path)
    a, b = box("box-a", backend, repo), box("box-b", backend, repo)
    with running(a.daemon):
        assert wait_until(lambda: len(a.reconciles) == 1)
        with running(b.daemon):
            assert wait_until(lambda: b.leadership.fleet == "home")
            a.daemon.stop.set()
            a.daemon.triggers.fire("stop")
            # No trigger but the takeover itself: the standby runs within a poll or two.
            assert wait_until(lambda: len(b.reconciles) == 1, timeout=5)
            assert b.leadership.leading
            assert leader_metric(b) == 'proxyfleet_leader{fleet="home"} 1.0'
            assert http(b.daemon, "/healthz")[1].startswith(b"ok: leader of fleet home")


def test_a_leader_whose_lock_is_lost_stops_writing_status_and_becomes_standby(
    tmp_path: Path,
) -> None:
    backend = FakeLockBackend()
    repo = fleet_repo(tmp_path)
    a = box("box-a", backend, repo)
    with running(a.daemon):
        assert wait_until(lambda: len(a.reconciles) == 1)
        other = FakeLocks(backend, Holder("box-c", 300, "apply")).lock("home")
        backend.lose("home")
        assert other.acquire()
        assert wait_until(lambda: not a.leadership.leading)
        a.daemon.triggers.fire("webhook")
        assert wait_until(lambda: "led by apply on box-c" in http(a.daemon, "/healthz")[1].decode())
        assert len(a.reconciles) == 1
        assert leader_metric(a) == 'proxyfleet_leader{fleet="home"} 0.0'
        threading.Event().wait(0.2)
        assert len(a.reconciles) == 1


def test_a_daemon_that_stands_by_drops_its_picture_of_hosts_and_proxies() -> None:
    metrics = Metrics()
    metrics.leading("home", True)
    metrics.record(report(reachable=False, blocked=True))
    before = metrics.exposition().decode()
    assert "proxyfleet_host_up{" in before
    assert "proxyfleet_proxy_health{" in before
    assert "proxyfleet_blocked_actions{" in before

    metrics.leading("home", False)

    after = metrics.exposition().decode()
    assert "proxyfleet_host_up{" not in after
    assert "proxyfleet_proxy_health{" not in after
    assert "proxyfleet_blocked_actions{" not in after
    assert 'proxyfleet_condition{condition="Ready"} 0.0' in after
    assert 'proxyfleet_leader{fleet="home"} 0.0' in after


def test_a_run_during_which_the_lock_went_writes_no_status(tmp_path: Path) -> None:
    backend = FakeLockBackend()
    leadership = Leadership(FakeLocks(backend, Holder("box-a", 100, "daemon")), poll=0.05)
    runs: list[str] = []

    def reconcile(root: Path, revision: str) -> RunReport:
        runs.append(revision)
        if len(runs) == 2:
            backend.lose("home")  # mid-run: a lease that ran out, or a hand-over
        return report(revision=revision)

    status = MemoryStatusSink()
    daemon = real_daemon(
        DaemonSettings(interval=3600, listen=ListenSettings("127.0.0.1", 0)),
        source_cycle(
            FakeSource(fleet_repo(tmp_path)),
            reconcile,
            leadership=leadership,
            fleet_of=compose.fleet_of,
        ),
        metrics=Metrics(),
        status=status,
        handle_signals=False,
        leadership=leadership,
        serve_http=False,
    )
    daemon.run_once(("first",))
    assert len(status.documents) == 1

    daemon.run_once(("second",))

    assert len(runs) == 2
    assert len(status.documents) == 1
