"""The call deadline of the libvirt session: one shared watchdog thread, not a thread per call.

Real (short) time: the watchdog sleeps on a condition variable, so the tests
wait for events with generous bounds instead of sleeping exact amounts.
"""

from __future__ import annotations

import threading
import time

import pytest

from reconciler.adapters.hypervisor.transport.deadline import Deadline, Watchdog


class Expiry:
    """An ``expire`` callback that records when it ran."""

    def __init__(self) -> None:
        self.fired = threading.Event()
        self.when: list[float] = []

    def __call__(self) -> None:
        self.when.append(time.monotonic())
        self.fired.set()


def test_an_armed_deadline_fires_once_after_its_seconds() -> None:
    expire = Expiry()
    deadline = Deadline(0.05, expire, watchdog=Watchdog())
    armed_at = time.monotonic()
    deadline.arm()
    assert expire.fired.wait(5)
    time.sleep(0.1)
    assert deadline.expired
    assert len(expire.when) == 1
    assert expire.when[0] - armed_at >= 0.05


def test_a_cancelled_deadline_never_fires() -> None:
    expire = Expiry()
    deadline = Deadline(0.05, expire, watchdog=Watchdog())
    deadline.arm()
    deadline.cancel()
    assert not expire.fired.wait(0.3)
    assert not deadline.expired


def test_rearming_on_progress_postpones_the_expiry() -> None:
    expire = Expiry()
    deadline = Deadline(0.2, expire, watchdog=Watchdog())
    started = time.monotonic()
    deadline.arm()
    while time.monotonic() - started < 0.5:  # progress every 50 ms for 0.5 s
        time.sleep(0.05)
        deadline.arm()
    assert not expire.fired.is_set()
    assert expire.fired.wait(5)


def test_an_earlier_deadline_wakes_a_watchdog_sleeping_towards_a_later_one() -> None:
    watchdog = Watchdog()
    late_expire = Expiry()
    early_expire = Expiry()
    late = Deadline(30, late_expire, watchdog=watchdog)
    late.arm()
    time.sleep(0.05)  # the watchdog now sleeps towards +30 s
    early = Deadline(0.05, early_expire, watchdog=watchdog)
    early.arm()
    assert early_expire.fired.wait(5)
    assert not late.expired
    late.cancel()


def test_many_calls_share_one_watchdog_thread() -> None:
    watchdog = Watchdog()
    before = threading.active_count()
    armed = [Deadline(60, lambda: None, watchdog=watchdog) for _ in range(200)]
    for deadline in armed:
        deadline.arm()
    assert threading.active_count() <= before + 1
    for deadline in armed:
        deadline.cancel()


def test_a_failing_expiry_is_logged_and_later_deadlines_still_fire(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watchdog = Watchdog()
    expire = Expiry()

    def broken() -> None:
        raise RuntimeError("link already gone")

    Deadline(0.01, broken, watchdog=watchdog).arm()
    Deadline(0.1, expire, watchdog=watchdog).arm()
    assert expire.fired.wait(5)
    assert "link already gone" in caplog.text
