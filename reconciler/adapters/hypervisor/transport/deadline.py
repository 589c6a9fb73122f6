"""Deadlines for libvirt calls: one watchdog thread for every armed deadline of the process.

A libvirt call that hangs (a dead link the kernel has not noticed yet) would
hold its caller forever; ``LibvirtSession`` arms a ``Deadline`` around each
call, and when it expires the connection is torn down from the watchdog's
side, so the call returns with an error the session classifies.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("reconciler.libvirt")


class Watchdog:
    """One thread for every armed ``Deadline`` of the process.

    A ``threading.Timer`` per call started a thread per libvirt call, which
    cost more than the call itself on an idle inventory (about 0.25 ms of a
    0.3 ms metadata read). Here arming is a dict write; the thread wakes only
    when the earliest deadline is due, and is told to look again only when a
    new deadline is earlier than the one it sleeps towards.
    """

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.monotonic = monotonic
        self._cond = threading.Condition()
        self._armed: dict[Deadline, float] = {}
        self._wake_at = float("inf")
        self._thread: threading.Thread | None = None

    def arm(self, deadline: Deadline, expires_at: float) -> None:
        with self._cond:
            self._armed[deadline] = expires_at
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="libvirt-deadlines", daemon=True
                )
                self._thread.start()
            if expires_at < self._wake_at:
                self._cond.notify()

    def cancel(self, deadline: Deadline) -> None:
        with self._cond:
            self._armed.pop(deadline, None)

    def _run(self) -> None:
        while True:
            with self._cond:
                now = self.monotonic()
                due = [d for d, at in self._armed.items() if at <= now]
                for deadline in due:
                    del self._armed[deadline]
                    deadline.expired = True
                if not due:
                    self._wake_at = min(self._armed.values(), default=float("inf"))
                    timeout = self._wake_at - now if self._armed else None
                    self._cond.wait(timeout)
                    continue
            for deadline in due:
                # Aborting closes links and may take a moment; other deadlines must not wait.
                threading.Thread(target=deadline.fire, name="libvirt-abort", daemon=True).start()


WATCHDOG = Watchdog()


class Deadline:
    """A watchdog for one call: fires ``expire`` unless re-armed or cancelled in time.

    ``expire`` runs on a thread of its own, once.
    """

    def __init__(
        self, seconds: float, expire: Callable[[], None], *, watchdog: Watchdog | None = None
    ) -> None:
        self.seconds = seconds
        self.expired = False
        self._expire = expire
        self._watchdog = watchdog if watchdog is not None else WATCHDOG

    def arm(self) -> None:
        """(Re)start the countdown; long transfers call this on progress."""
        self._watchdog.arm(self, self._watchdog.monotonic() + self.seconds)

    def cancel(self) -> None:
        self._watchdog.cancel(self)

    def fire(self) -> None:
        """Called by the watchdog (which set ``expired``) once the countdown has run out."""
        try:
            self._expire()
        except Exception:  # nobody waits for this thread: say what went wrong
            log.exception("aborting an expired libvirt call failed")
