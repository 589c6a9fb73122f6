"""``ToozLocks``: the fleet lock over tooz (file lock, etcd v3, ZooKeeper).

The only module that imports tooz. Backends by URL:

- ``file:///var/lib/proxyfleet/locks`` (the default, in the state dir): a
  ``flock`` on one box. The kernel drops it when the holder dies, so it has
  no TTL and cannot be lost while the holder lives.
- ``etcd3+http://HOST:2379`` (or ``etcd3+https``): a key bound to an etcd
  lease of ``ttl`` seconds, through etcd's JSON gateway. tooz talks to one
  endpoint; point it at a local ``etcd gateway`` that lists every member so
  that a dead member costs one renewal, not the lock (docs/operations.md).
- ``zookeeper://HOST:2181``: an ephemeral znode of a session of ``ttl``
  seconds (needs the kazoo package; not installed by default, not tested here).

Fencing needs ``held()`` to turn False *before* the service may hand the lock
to someone else. The lease of a renewal sent at ``t`` lasts until at least
``t + ttl`` on the server (it cannot have started earlier than we sent), so
the lock counts as held until ``t + ttl - margin`` after the last renewal
that succeeded, with ``margin = ttl / 3``; renewals run every ``ttl / 6``,
and a quarter of that after one that failed.
Once that moment passes the lock is lost for good: the coordinator is
dropped (so nothing renews the old lease again, even if the service comes
back and still has it) and the next ``acquire`` starts a fresh one.

The holder's identity (box, pid, role, since) is recorded as its tooz group
member capabilities in the group ``proxyfleet.<fleet>``, so that others can
name it; on the file backend a member that died without leaving stays in the
group, so members of this box whose pid no longer runs are ignored.

Every tooz failure becomes CoordinationError here, once.
"""

from __future__ import annotations

import contextlib
import logging
import math
import secrets
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from tooz import ToozError, coordination

from reconciler.adapters.coordination.fleetlock import (
    holder_caps,
    holder_from_caps,
    holder_gone,
    utc_now,
)
from reconciler.adapters.coordination.toozurl import driver_url
from reconciler.errors import CoordinationError
from reconciler.model.coordination import Holder
from reconciler.ports.locks import FleetLock

log = logging.getLogger(__name__)

Monotonic = Callable[[], float]

RETRY_SPLIT = 4
"""After a failed renewal the next one is tried a quarter of the renewal period later."""


def failures() -> tuple[type[BaseException], ...]:
    """What a backend call may raise: tooz's own errors, OSError, and the etcd client's
    that tooz's driver lets through (its heartbeat translates nothing). The etcd client
    is not imported here: it loads with tooz's etcd driver, for an etcd URL only (with
    requests, about 0.1 s of every command's start), and its errors cannot be raised
    before it is loaded."""
    etcd = sys.modules.get("etcd3gw.exceptions")
    if etcd is None:
        return (ToozError, OSError)
    return (ToozError, OSError, etcd.Etcd3Exception)


def default_url(state_dir: Path) -> str:
    """The file backend in the state dir: needs nothing, serves one box."""
    return f"file://{state_dir / 'locks'}"


def _why(exc: BaseException) -> str:
    """The etcd client's exceptions often have no text: name the type then."""
    return str(exc) or type(exc).__name__


class ToozFleetLock:
    """One fleet's lock in this process. See the module docstring for the lease rules."""

    def __init__(
        self,
        fleet: str,
        *,
        url: str,
        me: Holder,
        ttl: float,
        monotonic: Monotonic = time.monotonic,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._fleet = fleet
        self._url = url
        self._me = me
        self._ttl = ttl
        self._monotonic = monotonic
        self._clock = clock
        self._name = f"proxyfleet-{fleet}".encode()
        self._group = f"proxyfleet.{fleet}".encode()
        self._member = f"{me.box}.{me.pid}.{secrets.token_hex(4)}".encode()
        self._mu = threading.Lock()
        self._coord: coordination.CoordinationDriver | None = None
        # (the tooz lock we hold, monotonic time until which it counts as held): replaced as
        # one tuple so that held() reads it without taking _mu.
        self._state: tuple[Any, float] = (None, -math.inf)
        self._beat_stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._epoch = 0

    @property
    def fleet(self) -> str:
        return self._fleet

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def _timed(self) -> bool:
        return not math.isinf(self._ttl)

    @property
    def poll(self) -> float:
        """Seconds between tries while waiting for the lock."""
        return min(max(self._ttl / 10, 0.2), 2.0) if self._timed else 0.5

    def _valid_after(self, sent: float) -> float:
        """Until when a lease renewed by a request sent at ``sent`` counts as ours."""
        return sent + self._ttl * 2 / 3 if self._timed else math.inf

    # -- FleetLock -------------------------------------------------------------

    def held(self) -> bool:
        lock, until = self._state
        return lock is not None and self._monotonic() < until

    def acquire(self, *, wait: float = 0.0, stop: threading.Event | None = None) -> bool:
        deadline = self._monotonic() + wait
        pause = stop if stop is not None else threading.Event()
        while True:
            if self._try():
                return True
            left = deadline - self._monotonic()
            if pause.is_set() or left <= 0:
                return False
            pause.wait(min(self.poll, left))

    def release(self) -> None:
        self._stop_heartbeat()
        with self._mu:
            lock, _ = self._state
            self._state = (None, -math.inf)
            coord = self._coord
            if lock is None or coord is None:
                return
            try:
                lock.release()
                coord.leave_group(self._group).get()
            except coordination.MemberNotJoined:
                pass
            except failures() as exc:
                # The lease runs out on its own; a fresh coordinator makes sure we never renew it.
                log.warning(
                    "Releasing the lock of fleet %s failed (%s); it expires.", self.fleet, exc
                )
                self._discard_locked()
        log.info("Released the lock of fleet %s.", self.fleet)

    def holder(self) -> Holder | None:
        caught: tuple[type[BaseException], ...] = (*failures(), CoordinationError)
        try:
            with self._mu:
                coord = self._coordinator_locked()
            members = coord.get_members_with_capabilities(self._group).get()
        except caught as exc:
            log.debug("Cannot read the holder of fleet %s: %s", self.fleet, _why(exc))
            return None
        found = [
            h
            for h in map(holder_from_caps, members.values())
            if h is not None and not holder_gone(h)
        ]
        return max(found, key=lambda h: h.since or datetime.min, default=None)

    # -- internals -------------------------------------------------------------

    def _try(self) -> bool:
        with self._mu:
            lock, _ = self._state
            if lock is not None and self.held():
                return True
            if lock is not None:
                self._lapsed_locked("its lease ran out")
            coord = self._coordinator_locked()
            candidate = coord.get_lock(self._name)
            sent = self._monotonic()
            try:
                got = bool(candidate.acquire(blocking=False))
            except failures() as exc:
                self._discard_locked()
                raise CoordinationError(
                    f"taking the lock of fleet {self.fleet}: {_why(exc)}"
                ) from exc
            if not got:
                return False
            self._epoch += 1
            self._state = (candidate, self._valid_after(sent))
            me = self._me.holding(self._clock())
        log.info("Took the lock of fleet %s as %s.", self.fleet, me)
        self._publish(coord, me)
        if self._timed:
            self._start_heartbeat(coord, candidate)
        return True

    def _coordinator_locked(self) -> coordination.CoordinationDriver:
        if self._coord is None:
            try:
                coord = coordination.get_coordinator(self._url, self._member)
                coord.start(start_heart=False)
            except ImportError as exc:  # tooz loads a backend's client library only when used
                raise CoordinationError(
                    f"coordination service {self._safe_url}: its client library is not "
                    f"installed ({exc.name or exc}); zookeeper:// needs the kazoo package"
                ) from exc
            except failures() as exc:
                raise CoordinationError(
                    f"coordination service {self._safe_url}: {_why(exc)}"
                ) from exc
            self._coord = coord
        return self._coord

    @property
    def _safe_url(self) -> str:
        parts = urllib.parse.urlsplit(self._url)
        return f"{parts.scheme}://{parts.hostname or ''}{parts.path if not parts.hostname else ''}"

    def _discard_locked(self) -> None:
        coord, self._coord = self._coord, None
        if coord is None:
            return
        try:
            coord.stop()
        except failures() as exc:
            log.debug("Stopping the coordinator failed: %s", _why(exc))

    def _lapsed_locked(self, why: str) -> None:
        lock, _ = self._state
        self._state = (None, -math.inf)
        log.error(
            "Lost the lock of fleet %s: %s. Acting stops until it is ours again.", self.fleet, why
        )
        if lock is not None:
            try:  # compare-and-delete of our own key: frees it at once if the service is back
                lock.release()
            except failures() as exc:
                log.debug("Releasing the lapsed lock failed: %s", _why(exc))
        self._discard_locked()

    def _publish(self, coord: coordination.CoordinationDriver, me: Holder) -> None:
        """Record who holds the lock (best effort: the lock is ours either way)."""
        caps = holder_caps(me)
        try:
            coord.heartbeat()  # a membership lease that ran out while idle is renewed first
            with contextlib.suppress(coordination.GroupAlreadyExist):
                coord.create_group(self._group).get()
            try:
                coord.join_group(self._group, caps).get()
            except coordination.MemberAlreadyExist:
                coord.update_capabilities(self._group, caps).get()
        except failures() as exc:
            log.warning("Could not record the holder of fleet %s: %s", self.fleet, _why(exc))

    def _start_heartbeat(self, coord: coordination.CoordinationDriver, lock: Any) -> None:
        self._stop_heartbeat()
        self._beat_stop = threading.Event()
        self._beat = threading.Thread(
            target=self._heartbeat,
            args=(coord, lock, self._beat_stop),
            name=f"lock-{self.fleet}",
            daemon=True,
        )
        self._beat.start()

    def _stop_heartbeat(self) -> None:
        self._beat_stop.set()
        beat, self._beat = self._beat, None
        if beat is not None and beat is not threading.current_thread():
            beat.join(timeout=self._ttl)

    def _heartbeat(
        self, coord: coordination.CoordinationDriver, lock: Any, stop: threading.Event
    ) -> None:
        period = max(self._ttl / 6, 0.1)
        failing = False
        pause = period
        while not stop.wait(pause):
            sent = self._monotonic()
            if self._state[0] is not lock:
                return
            if not self.held():
                with self._mu:
                    if self._state[0] is lock:
                        self._lapsed_locked(f"no renewal for {self._ttl * 2 / 3:.0f} s")
                return
            try:
                coord.heartbeat()
            except failures() as exc:
                if not failing:
                    log.warning("Renewing the lock of fleet %s failed: %s", self.fleet, _why(exc))
                failing = True
                # Again soon, not a whole period later: an etcd election (a member died)
                # answers again within a second or two, and the lease must be renewed
                # before the margin runs out.
                pause = period / RETRY_SPLIT
                continue
            pause = period
            if failing:
                log.info("Renewing the lock of fleet %s works again.", self.fleet)
                failing = False
            with self._mu:
                if self._state[0] is lock and self.held():
                    self._state = (lock, self._valid_after(sent))


class ToozLocks:
    """The LockService over tooz. ``url`` as in the module docstring; ``ttl`` in seconds."""

    def __init__(
        self,
        url: str,
        *,
        me: Holder,
        ttl: float = 20.0,
        monotonic: Monotonic = time.monotonic,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self._url = driver_url(url, ttl)
        self._ttl = math.inf if url.startswith("file://") else ttl
        self._me = me
        self._monotonic = monotonic
        self._clock = clock
        self._locks: dict[str, ToozFleetLock] = {}
        self._mu = threading.Lock()

    @property
    def ttl(self) -> float:
        return self._ttl

    def lock(self, fleet: str) -> FleetLock:
        with self._mu:
            if fleet not in self._locks:
                self._locks[fleet] = ToozFleetLock(
                    fleet,
                    url=self._url,
                    me=self._me,
                    ttl=self._ttl,
                    monotonic=self._monotonic,
                    clock=self._clock,
                )
            return self._locks[fleet]

    def close(self) -> None:
        with self._mu:
            locks = list(self._locks.values())
        for lock in locks:
            lock.release()
            with lock._mu:
                lock._discard_locked()
