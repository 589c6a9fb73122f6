"""What ``FakeHypervisor`` remembers and injects: its call log, scripted failures, and
how many calls run at once.

Kept apart from the fake's rules (reconciler.adapters.hypervisor.fakehost), which say
what a call does to the host; this module says what a test may make a call do instead:
raise a scripted error (a ``HostError`` the real adapter raises, or any other exception
standing for an adapter bug), take a while, be counted.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

ANY = "*"
"""A failure's target that matches every call of its method."""

MUTATING = frozenset(
    {
        "ensure_image",
        "create",
        "start",
        "set_owner",
        "delete",
        "remove_volumes",
        "remove_unused_base",
    }
)
"""The methods that may change a host: what ``latency`` slows and the gauges count."""


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    """observe, ensure_image, create, start, set_owner, delete, remove_volumes,
    remove_unused_base, addresses or close."""
    target: str = ""
    """The domain name, the image key for ensure_image, the base for remove_unused_base;
    '' for observe/close."""


@dataclass
class _Failure:
    method: str
    target: str
    error: Exception
    remaining: int | None


class Failures:
    """Scripted failures, taken in the order they were added. Not thread-safe on its own:
    the fake calls it under its lock."""

    def __init__(self) -> None:
        self._queue: list[_Failure] = []

    def add(self, method: str, error: Exception, *, times: int | None, target: str) -> None:
        self._queue.append(_Failure(method, target, error, times))

    def take(self, call: Call) -> Exception | None:
        """The error ``call`` raises, if one is scripted for it (and one use of it spent)."""
        for failure in self._queue:
            if failure.method != call.method or failure.target not in (ANY, call.target):
                continue
            if failure.remaining is not None:
                failure.remaining -= 1
                if failure.remaining <= 0:
                    self._queue.remove(failure)
            return failure.error
        return None


class Gauge:
    """Counts calls in flight; remembers the most seen at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.max = 0

    def __enter__(self) -> Gauge:
        with self._lock:
            self.now += 1
            self.max = max(self.max, self.now)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1
