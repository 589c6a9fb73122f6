from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemonutil import FakeCycle, real_daemon, running, wait_until
from notifysocket import NotifySocket

from reconciler.adapters.surface.metrics import Metrics
from reconciler.adapters.surface.notify import SdNotify
from reconciler.model.settings import DaemonSettings, ListenSettings


@pytest.fixture
def systemd(tmp_path: Path) -> Iterator[NotifySocket]:
    bound = NotifySocket(tmp_path / "notify.sock")
    yield bound
    bound.close()


def test_a_daemon_under_systemd_says_ready_and_feeds_the_watchdog(
    systemd: NotifySocket, tmp_path: Path
) -> None:
    env = {"NOTIFY_SOCKET": str(systemd.path), "WATCHDOG_USEC": "200000"}
    notifier = SdNotify(env)
    assert notifier.watchdog_interval == pytest.approx(0.1)
    cycle = FakeCycle()
    daemon = real_daemon(
        DaemonSettings(interval=3600, listen=ListenSettings("127.0.0.1", 0), state_dir=tmp_path),
        cycle,
        metrics=Metrics(),
        notifier=notifier,
        handle_signals=False,
    )
    with running(daemon):
        assert wait_until(lambda: "READY=1" in systemd.lines())
        assert wait_until(lambda: systemd.lines().count("WATCHDOG=1") >= 3)
        assert wait_until(
            lambda: any(line.startswith("STATUS=success at") for line in systemd.lines())
        )
    assert wait_until(lambda: "STOPPING=1" in systemd.lines())


def test_an_abstract_notify_socket_is_addressed_with_a_leading_nul() -> None:
    name = f"proxyfleet-test-{os.getpid()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(2)
        assert SdNotify({"NOTIFY_SOCKET": "@" + name}).ready("up")
        assert sock.recv(100) == b"READY=1\nSTATUS=up"


def test_without_notify_socket_nothing_is_sent_and_there_is_no_watchdog() -> None:
    notifier = SdNotify({"WATCHDOG_USEC": "1000000"})
    assert not notifier.ready()
    assert notifier.watchdog_interval is None


def test_a_watchdog_meant_for_another_process_is_ignored(systemd: NotifySocket) -> None:
    env = {"NOTIFY_SOCKET": str(systemd.path), "WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}
    assert SdNotify(env).watchdog_interval is None
