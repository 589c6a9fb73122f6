"""Extra libvirt connections to one host, for calls that run many at once (deletes).

libvirtd serves at most ``max_client_requests`` calls of one client at a time
(5 by default) and queues the rest, so ten deletes on one connection take as long
as two rounds of five. A thread inside ``LibvirtSession.lane()`` makes its calls on
a lane: a connection of its own over the same SSH link and local socket, shared by
at most ``CALLS_PER_LANE`` such threads. Lanes are dialled on first use, kept for
the next deletes, and forgotten with the link (a dropped link drops them all).

This module only decides which lane a thread uses; the session dials and checks the
connections (reconciler.adapters.hypervisor.transport.libvirtrpc).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

CALLS_PER_LANE = 5
"""Threads sharing one lane: libvirtd's default ``max_client_requests``."""


@dataclass(slots=True, eq=False)
class Lane:
    """One extra connection (None until dialled, or after the link dropped), how many
    threads use it now, and the lock its dial holds (not the session's: the lanes of a
    host dial at the same time)."""

    conn: Any = None
    users: int = 0
    dialling: threading.Lock = field(default_factory=threading.Lock)


class Lanes:
    """Which lane each thread uses. Thread-safe."""

    def __init__(self, per_lane: int = CALLS_PER_LANE) -> None:
        self._per_lane = max(1, per_lane)
        self._lock = threading.Lock()
        self._lanes: list[Lane] = []
        self._local = threading.local()

    def current(self) -> Lane | None:
        """The calling thread's lane, None outside ``held``."""
        lane: Lane | None = getattr(self._local, "lane", None)
        return lane

    @contextmanager
    def held(self) -> Iterator[Lane]:
        """A lane for the calling thread: the least used one with room, else a new one.
        Nested use keeps the outer lane."""
        outer = self.current()
        if outer is not None:
            yield outer
            return
        with self._lock:
            free = [lane for lane in self._lanes if lane.users < self._per_lane]
            lane = min(free, key=lambda each: each.users) if free else Lane()
            if not free:
                self._lanes.append(lane)
            lane.users += 1
        self._local.lane = lane
        try:
            yield lane
        finally:
            self._local.lane = None
            with self._lock:
                lane.users -= 1

    def owns(self, conn: Any) -> bool:
        """Whether ``conn`` is one of the lanes' live connections."""
        with self._lock:
            return conn is not None and any(lane.conn is conn for lane in self._lanes)

    def forget(self) -> list[Any]:
        """Drop every lane's connection (not closed: a call may still be inside it) and
        return them; threads holding a lane dial it afresh on their next call."""
        with self._lock:
            dropped = [lane.conn for lane in self._lanes if lane.conn is not None]
            for lane in self._lanes:
                lane.conn = None
            return dropped

    def dialled(self) -> int:
        """How many lanes hold a connection now."""
        with self._lock:
            return sum(1 for lane in self._lanes if lane.conn is not None)
