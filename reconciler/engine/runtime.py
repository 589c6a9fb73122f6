"""What the engine takes from the outside world besides hosts: time, chance, a stop flag.

Everything is injected so that tests drive time with a fake clock and a fake
sleep, and so that a retry's jitter is reproducible.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime


def utc_now() -> datetime:
    return datetime.now(UTC)


class Heartbeat:
    """When the engine last finished something (monotonic seconds; None: nothing yet).

    A long rollout is one long cycle; the daemon's watchdog asks this, not the
    cycle's age alone, whether the cycle is hung.
    """

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self.last: float | None = None

    def touch(self) -> None:
        with self._lock:
            self.last = self._monotonic()


@dataclass(frozen=True, slots=True)
class Runtime:
    """Time, randomness and the stop request, as the engine sees them.

    ``clock`` gives timezone-aware UTC wall time (recorded in reports and VM
    metadata); ``monotonic`` measures deadlines and durations in seconds;
    ``sleep`` waits (production passes ``stop.wait`` so that a shutdown cuts a
    backoff short); ``random`` returns a float in [0, 1) for jitter. ``stop``,
    once set, lets the action in flight finish and starts no new one.
    """

    clock: Callable[[], datetime] = utc_now
    monotonic: Callable[[], float] = time.monotonic
    sleep: Callable[[float], object] = time.sleep
    random: Callable[[], float] = random.random
    stop: threading.Event = field(default_factory=threading.Event)
    heartbeat: Heartbeat = field(default_factory=Heartbeat)
    """Touched by the executor whenever an action ends."""

    @classmethod
    def interruptible(cls, stop: threading.Event | None = None) -> Runtime:
        """The production runtime: real time, and sleeps that a stop request wakes."""
        event = stop if stop is not None else threading.Event()
        return cls(sleep=event.wait, stop=event)
