"""Owners remembered between observes until libvirt says the domain changed (the daemon).

An idle fleet's observe is mostly one ``virDomainGetMetadata`` per domain, and on an
idle fleet every one of them answers what it answered a cycle ago. With ``watch`` on
(``proxyfleet run``), a host's session registers two domain event callbacks on its
libvirt connection, lifecycle (defined, undefined, started, stopped, ...) and metadata
change, and keeps each domain's ownership text by UUID until one of them names that
domain. An observe then reads only the domains it has not seen, or seen changed.

What keeps it honest:

- The cache belongs to one connection. A redial (a dropped link, a restarted
  libvirtd) starts an empty one: events missed while no connection was up are never
  trusted away.
- A read stores its answer only when no event for that domain arrived since the read
  began (``begin`` / ``put``): an answer that may predate a change is dropped.
- Our own writes (``set_owner``) forget the domain themselves, without waiting for the
  event; a new domain has a new UUID, a deleted one is no longer listed.
- Every text is read again after ``OWNER_MAX_AGE`` seconds, events or not.
- An event reaches the cache a moment after libvirtd sent it (libvirt queues it for the
  event loop thread): a change made while an observe runs may be seen a cycle later,
  as a change made just after it would be. Deletes never rely on this: ``delete``
  reads the domain's XML and refuses a domain without our element or of another fleet
  right before it acts.

libvirt delivers events only to a process that runs an event loop: ``start_event_loop``
registers libvirt's default one, once per process, before the session's first
connection, and runs it on a daemon thread. ``OwnerWatch`` is the cache's lifecycle in a
session: which cache belongs to the live connection, made on first use, dropped on a
redial.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import libvirt

from reconciler.errors import HostError, TransientError

log = logging.getLogger("reconciler.host")

OWNER_MAX_AGE = 600.0
"""Seconds an owner text read is trusted without an event; then it is read again."""
CHANGES_KEPT = 4096
"""Domains whose last event is remembered for reads in flight; past it, every read then in
flight is dropped instead (``OwnerCache.changed``)."""
EVENT_IDS = (
    libvirt.VIR_DOMAIN_EVENT_ID_LIFECYCLE,
    libvirt.VIR_DOMAIN_EVENT_ID_METADATA_CHANGE,
)


class _EventLoop:
    """libvirt's default event loop, registered once and run on a thread of its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            libvirt.virEventRegisterDefaultImpl()
            self._thread = threading.Thread(target=self._run, name="libvirt-events", daemon=True)
            self._thread.start()

    @staticmethod
    def _run() -> None:
        while True:
            try:
                libvirt.virEventRunDefaultImpl()
            except libvirt.libvirtError as exc:  # one bad iteration must not stop events
                log.warning("libvirt event loop: %s", exc)
                time.sleep(0.1)


_EVENT_LOOP = _EventLoop()


def start_event_loop() -> None:
    """Register and run libvirt's event loop (once per process; later calls do nothing).
    Connections opened before it get no events."""
    _EVENT_LOOP.start()


@dataclass(frozen=True)
class _Known:
    text: str | None
    read_at: float


class OwnerCache:
    """The ownership text (None: the domain has none) of each domain of one connection, by
    UUID, from its last read until an event names the domain. Thread-safe; the event
    callbacks run on the event loop thread."""

    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_age: float = OWNER_MAX_AGE,
    ) -> None:
        self._clock = clock
        self._max_age = max_age
        self._lock = threading.Lock()
        self._known: dict[str, _Known] = {}
        self._events = 0
        self._last_event: dict[str, int] = {}
        self._oldest_trusted = 0
        self._callbacks: list[int] = []
        self._conn: Any = None

    def get(self, uuid: str) -> tuple[bool, str | None]:
        """(True, text) when the domain's text is known and fresh; (False, None) otherwise."""
        with self._lock:
            known = self._known.get(uuid)
            if known is None or self._clock() - known.read_at > self._max_age:
                return False, None
            return True, known.text

    def begin(self) -> int:
        """A token for a read about to start; pass it to ``put`` with what the read found."""
        with self._lock:
            return self._events

    def put(self, uuid: str, began: int, text: str | None) -> None:
        """Remember ``text`` unless an event for ``uuid`` came after the read began."""
        with self._lock:
            if began < self._oldest_trusted or self._last_event.get(uuid, -1) > began:
                return
            self._known[uuid] = _Known(text, self._clock())

    def changed(self, uuid: str) -> None:
        """The domain changed (an event, or our own write): forget it, and refuse what a
        read already in flight brings back."""
        with self._lock:
            self._events += 1
            self._known.pop(uuid, None)
            if len(self._last_event) >= CHANGES_KEPT:
                self._last_event.clear()
                self._oldest_trusted = self._events
            self._last_event[uuid] = self._events

    @property
    def conn(self) -> Any:
        """The connection whose events this cache follows (None before ``watch``)."""
        return self._conn

    def __len__(self) -> int:
        with self._lock:
            return len(self._known)

    def watch(self, conn: Any) -> None:
        """Register the lifecycle and metadata-change callbacks on ``conn`` (2 RPCs).
        Raises libvirtError; what was registered stays registered for ``stop``."""
        self._conn = conn
        for event_id in EVENT_IDS:
            self._callbacks.append(
                conn.domainEventRegisterAny(None, event_id, self._on_event, None)
            )

    def stop(self) -> None:
        """Deregister the callbacks (best effort: on a dead link libvirt drops them locally
        and only the RPC fails), so the old connection can be freed."""
        conn, self._conn = self._conn, None
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                conn.domainEventDeregisterAny(callback)
            except libvirt.libvirtError as exc:
                log.debug("domain event callback %d not deregistered: %s", callback, exc)

    def _on_event(self, _conn: Any, dom: Any, *_details: Any) -> None:
        """Any lifecycle or metadata event: the domain's text is read again."""
        try:
            self.changed(dom.UUIDString())
        except Exception:  # an exception here would be printed by libvirt, and lost
            log.exception("domain event not applied; forgetting every owner")
            with self._lock:
                self._known.clear()


class OwnerWatch:
    """The owner cache of one session's live connection: made when first asked for on a
    connection, dropped with it (``forget``). Not thread-safe: the session calls it under
    its own lock."""

    def __init__(self, host: str) -> None:
        self._host = host
        self._cache: OwnerCache | None = None
        self._refused: Any = None
        """The connection whose libvirtd refused the callbacks (not asked again)."""

    def on(self, conn: Any, register: Callable[[Callable[[Any], None]], None]) -> OwnerCache | None:
        """The cache of ``conn``: the one known, or a new one whose callbacks ``register``
        registers (one call of the session, 2 RPCs). None when libvirtd refused them on
        ``conn``. Raises the TransientError of the registration (the link failing)."""
        if self._cache is not None and self._cache.conn is conn:
            return self._cache
        if self._refused is conn:
            return None
        cache = OwnerCache()
        try:
            register(cache.watch)
        except HostError as exc:
            cache.stop()
            if isinstance(exc, TransientError):
                raise
            log.warning(
                "host %s: libvirt refused domain events (%s); owners are read in every observe",
                self._host,
                exc,
            )
            self._refused = conn
            return None
        self._cache = cache
        return cache

    def changed(self, uuid: str) -> None:
        """We changed the domain's owner: the known one is stale from now on."""
        cache = self._cache
        if cache is not None:
            cache.changed(uuid)

    def forget(self) -> OwnerCache | None:
        """The connection goes: its cache is returned to be stopped (after the link
        closed), and the next connection starts without one."""
        cache, self._cache = self._cache, None
        self._refused = None
        return cache
