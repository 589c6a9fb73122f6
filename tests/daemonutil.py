"""Helpers for daemon tests: a fake cycle, a daemon in a thread, HTTP calls, waiting."""

from __future__ import annotations

import dataclasses
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from reports import report

from reconciler.adapters.surface.httpapi import HttpApi
from reconciler.adapters.surface.metrics import Metrics
from reconciler.adapters.surface.notify import SdNotify
from reconciler.engine.daemon import Cycle, Daemon
from reconciler.engine.leadership import Leadership
from reconciler.engine.parts import DaemonParts
from reconciler.engine.runtime import Heartbeat, Runtime
from reconciler.model.report import RunReport
from reconciler.model.settings import DaemonSettings
from reconciler.ports.notifier import Notifier
from reconciler.ports.status import StatusSink


def real_daemon(
    settings: DaemonSettings,
    cycle: Cycle,
    *,
    metrics: Metrics | None = None,
    status: StatusSink | None = None,
    notifier: Notifier | None = None,
    leadership: Leadership | None = None,
    stop: threading.Event | None = None,
    monotonic: Callable[[], float] | None = None,
    heartbeat: Heartbeat | None = None,
    handle_signals: bool = False,
    follow_up: float | None = None,
    serve_http: bool = True,
) -> Daemon:
    """A daemon with the real parts the CLI wires (HTTP on ``settings.listen`` unless not
    ``serve_http``, Prometheus metrics, sd_notify without a socket unless given), each
    replaceable."""
    parts = DaemonParts(
        metrics=metrics if metrics is not None else Metrics(),
        surface=(lambda endpoints: HttpApi(settings.listen, endpoints)) if serve_http else None,
        notifier=notifier if notifier is not None else SdNotify({}),
        status=status,
        leadership=leadership,
    )
    runtime = Runtime.interruptible(stop)
    if monotonic is not None or heartbeat is not None:
        runtime = dataclasses.replace(
            runtime,
            monotonic=monotonic if monotonic is not None else runtime.monotonic,
            heartbeat=heartbeat if heartbeat is not None else runtime.heartbeat,
        )
    extra = {"follow_up": follow_up} if follow_up is not None else {}
    return Daemon(settings, cycle, parts, runtime=runtime, handle_signals=handle_signals, **extra)


def wait_until(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return check()


class FakeCycle:
    """Counts runs; ``hold`` makes every run wait until ``release`` is set."""

    def __init__(self, *, hold: bool = False) -> None:
        self.calls = 0
        self.running = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.error: Exception | None = None

    def __call__(self, stop: threading.Event) -> RunReport:
        self.calls += 1
        self.running.set()
        self.release.wait(10)
        self.running.clear()
        if self.error is not None:
            raise self.error
        return report(minute=self.calls)


@contextmanager
def running(daemon: Daemon) -> Iterator[Daemon]:
    thread = threading.Thread(target=daemon.run, name="daemon-under-test")
    thread.start()
    try:
        yield daemon
    finally:
        daemon.stop.set()
        daemon.triggers.fire("stop")
        thread.join(10)
        assert not thread.is_alive(), "the daemon did not stop"


def http(
    daemon: Daemon, path: str, *, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    host, port = daemon.http.address
    request = urllib.request.Request(
        f"http://{host}:{port}{path}",
        data=body,
        headers=headers or {},
        method="POST" if body is not None else "GET",
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.read()
