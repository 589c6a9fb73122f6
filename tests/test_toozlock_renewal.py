"""The lease renewal's rhythm: every sixth of the TTL, and sooner after a renewal failed."""

from __future__ import annotations

import math

from tooz import ToozError

from reconciler.adapters.coordination.toozlock import ToozFleetLock
from reconciler.model.coordination import Holder

ME = Holder("box-a", 101, "daemon")


class FlakyCoordinator:
    """A coordinator whose renewals fail for the calls numbered in ``failing``."""

    def __init__(self, failing: set[int]) -> None:
        self.failing = failing
        self.calls = 0

    def heartbeat(self) -> None:
        self.calls += 1
        if self.calls in self.failing:
            raise ToozError("etcdserver: leader changed")


class CountingStop:
    """A stop event that records each pause asked for and stops after ``rounds``."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        self.pauses: list[float] = []

    def wait(self, seconds: float) -> bool:
        self.pauses.append(seconds)
        return len(self.pauses) > self.rounds


def renewal_pauses(failing: set[int], rounds: int) -> list[float]:
    lock = ToozFleetLock("home", url="etcd3+http://127.0.0.1:1", me=ME, ttl=6.0)
    held = object()
    lock._state = (held, math.inf)  # as if taken: the heartbeat renews only its own lock
    stop = CountingStop(rounds)
    lock._heartbeat(FlakyCoordinator(failing), held, stop)  # type: ignore[arg-type]
    return stop.pauses


def test_renewals_run_every_sixth_of_the_ttl_while_they_succeed() -> None:
    assert renewal_pauses(set(), rounds=3) == [1.0, 1.0, 1.0, 1.0]


def test_after_a_failed_renewal_the_next_comes_a_quarter_period_later_until_one_succeeds() -> None:
    assert renewal_pauses({2, 3}, rounds=5) == [1.0, 1.0, 0.25, 0.25, 1.0, 1.0]
