"""One contract, two notifiers: the same cases against ``FakeNotifier`` and ``SdNotify``.

``FakeNotifier`` stands in for sd_notify in the daemon's unit tests, so what it records
and what its calls return must be what ``SdNotify`` sends to systemd and returns. Each
case runs against both: ``SdNotify`` over a real unix datagram socket bound in a
temporary directory (systemd's NOTIFY_SOCKET), whose datagrams are read back.
(``SdNotify({})``, no socket, is not a fake: it is the real notifier of a daemon not run
by systemd, and says every call went undelivered.)
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest
from notifysocket import NotifySocket

from reconciler.adapters.surface.fakenotifier import FakeNotifier
from reconciler.adapters.surface.notify import SdNotify
from reconciler.ports.notifier import Notifier

WATCHDOG = 1.5
"""Seconds between pings: WatchdogSec=3 (WATCHDOG_USEC=3000000), pinged at half."""


class Side(Protocol):
    notifier: Notifier

    def received(self) -> list[str]:
        """The datagrams delivered so far, oldest first."""

    def deaf(self) -> None:
        """Nothing listens any more."""


class FakeSide:
    def __init__(self) -> None:
        self.fake = FakeNotifier(watchdog_interval=WATCHDOG)
        self.notifier: Notifier = self.fake

    def received(self) -> list[str]:
        return list(self.fake.sent)

    def deaf(self) -> None:
        self.fake.listening = False


class SocketSide:
    def __init__(self, path: Path) -> None:
        self.systemd = NotifySocket(path)
        env = {"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": str(int(WATCHDOG * 2_000_000))}
        self.notifier = SdNotify(env)

    def received(self) -> list[str]:
        return list(self.systemd.drain())

    def deaf(self) -> None:
        self.received()
        self.systemd.close()


@pytest.fixture(params=["fake", "socket"])
def side(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Side]:
    if request.param == "fake":
        yield FakeSide()
        return
    real = SocketSide(tmp_path / "notify.sock")
    try:
        yield real
    finally:
        real.systemd.close()


def test_contract_each_call_is_one_datagram_of_the_protocol_s_lines_and_says_it_was_delivered(
    side: Side,
) -> None:
    n = side.notifier

    delivered = [n.ready("Starting"), n.watchdog(), n.status("success at 10:00"), n.stopping()]

    assert delivered == [True] * 4
    assert side.received() == [
        "READY=1\nSTATUS=Starting",
        "WATCHDOG=1",
        "STATUS=success at 10:00",
        "STOPPING=1",
    ]


def test_contract_a_status_is_one_line_whatever_whitespace_it_came_with(side: Side) -> None:
    assert side.notifier.status("failed:\n  kvm01   unreachable\n")
    assert side.notifier.ready() and side.notifier.stopping("Stopping")

    assert side.received() == [
        "STATUS=failed: kvm01 unreachable",
        "READY=1",
        "STOPPING=1\nSTATUS=Stopping",
    ]


def test_contract_the_watchdog_is_pinged_at_half_its_timeout(side: Side) -> None:
    assert side.notifier.watchdog_interval == pytest.approx(WATCHDOG)


def test_contract_a_notifier_nobody_listens_to_says_so_and_raises_nothing(side: Side) -> None:
    assert side.notifier.ready("up")
    side.deaf()

    assert [side.notifier.status("x"), side.notifier.watchdog(), side.notifier.stopping()] == [
        False
    ] * 3
