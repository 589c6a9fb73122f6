"""The libvirt connection to one host: dialled over SSH, traced, deadlined, classified.

Every libvirt call of the host adapter goes through ``LibvirtSession.call``
(or ``LibvirtSession.rpc`` for streams), which

- dials on first use (SSH, then the socket bridge, then ``virConnectOpen``) and
  redials when the SSH transport or the libvirt connection has died;
- arms a deadline (``SshSettings.call_timeout``): a call still running when it
  expires has its connection torn down, fails as TransientError and the next
  call dials afresh; long transfers re-arm it on progress;
- logs one line per call after it returns on the ``reconciler.libvirt`` logger
  at DEBUG: ``rpc=virDomainCreate host=kvm01 domain=pf-... duration_ms=12.3``,
  plus ``libvirt_code=42 libvirt_error=VIR_ERR_NO_DOMAIN`` on failure. At
  TRACE (level 5) callers add XML and metadata with ``trace()``. Upload bodies
  and cloud-init content are never passed to either;
- classifies ``libvirtError`` once: VIR_ERR_NO_DOMAIN / VIR_ERR_NO_STORAGE_VOL
  are NotFoundError; system, RPC and dead-connection errors are
  TransientError (the connection is dropped only when the link itself failed);
  everything else is PermanentError. A HostError raised inside a call was
  classified already and passes through untouched, leaving a healthy
  connection alone.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import libvirt

from reconciler.adapters.hypervisor.transport.deadline import Deadline
from reconciler.adapters.hypervisor.transport.lanes import Lane, Lanes
from reconciler.adapters.hypervisor.transport.libvirtcarrier import Carrier
from reconciler.adapters.hypervisor.transport.libvirterrors import classify, link_failed
from reconciler.adapters.hypervisor.transport.opensshforward import OpenSshForward, SshUnreachable
from reconciler.adapters.hypervisor.transport.ownerwatch import (
    OwnerCache,
    OwnerWatch,
    start_event_loop,
)
from reconciler.errors import HostError, TransientError
from reconciler.model import Host
from reconciler.model.settings import SshSettings

if TYPE_CHECKING:
    from reconciler.adapters.hypervisor.transport.sshbridge import SocketBridge

TRACE = 5
logging.addLevelName(TRACE, "TRACE")
log = logging.getLogger("reconciler.libvirt")

T = TypeVar("T")
RpcObserver = Callable[[str, str, float, bool], None]
"""Called after every libvirt call with (rpc, host, seconds, ok); e.g. a latency metric."""


def _fields(ids: dict[str, object]) -> str:
    return " ".join(f"{key}={value}" for key, value in ids.items() if value not in (None, ""))


EXIT_LOCK_WAIT = 2.0
"""Seconds the exit hook waits for a session's lock before closing its link regardless."""


class LibvirtSession:
    """One libvirt connection to one host over its SSH link. Thread-safe."""

    def __init__(
        self,
        host: Host,
        settings: SshSettings,
        *,
        open_connection: Callable[[str], Any] = libvirt.open,
        observer: RpcObserver | None = None,
        watch: bool = False,
    ) -> None:
        """``watch``: keep domain owners between observes, told of changes by libvirt's
        domain events (``owners``; reconciler.adapters.hypervisor.transport.ownerwatch)."""
        self.host = host
        self._settings = settings
        self._open_connection = open_connection
        self._observer = observer
        self._lock = threading.RLock()
        self._carrier = Carrier(host, settings)
        self._conn: Any = None
        self._lanes = Lanes()
        self._watch = watch
        self._owners = OwnerWatch(host.name)
        if watch:
            start_event_loop()  # before the first connection: only later ones get events
        _OPEN.add(self)

    @property
    def via(self) -> str:
        """How the libvirt socket is reached (``Carrier.via``)."""
        return self._carrier.via

    def call(self, rpc: str, fn: Callable[[Any], T], **ids: object) -> T:
        """Run ``fn(conn)`` (one libvirt call) under the deadline, traced and classified."""
        with self.rpc(rpc, **ids) as (conn, _deadline):
            return fn(conn)

    @contextmanager
    def rpc(self, rpc: str, **ids: object) -> Iterator[tuple[Any, Deadline]]:
        """The connection and the call's deadline, for calls that stream (re-arm on progress)."""
        conn = self.connection()
        deadline = Deadline(self._settings.call_timeout, lambda: self._abort(conn, rpc))
        started = time.monotonic()
        deadline.arm()
        try:
            yield conn, deadline
        except libvirt.libvirtError as exc:
            deadline.cancel()
            alive = self._alive(conn) and not deadline.expired
            error = self._failed(rpc, exc, started, alive=alive, ids=ids)
            if deadline.expired:
                raise TransientError(
                    f"no answer within {deadline.seconds:.0f} s; connection dropped",
                    host=self.host.name,
                    rpc=rpc,
                    code=error.code,
                    code_name=error.code_name,
                ) from exc
            if link_failed(exc, alive=alive):
                self._drop(conn, reason=f"{rpc} failed: {error}")
            raise error from exc
        except HostError as exc:
            self._record(rpc, started, ok=False, ids=ids, extra=f"error={type(exc).__name__}")
            raise
        else:
            self._record(rpc, started, ok=True, ids=ids)
        finally:
            deadline.cancel()

    @property
    def tracing(self) -> bool:
        """Whether ``trace`` writes anything (so callers can skip building its text)."""
        return log.isEnabledFor(TRACE)

    def trace(self, rpc: str, what: str, text: str, **ids: object) -> None:
        """At TRACE only: XML or metadata a call sent or received. Never cloud-init content."""
        if log.isEnabledFor(TRACE):
            log.log(
                TRACE, "rpc=%s host=%s %s %s:\n%s", rpc, self.host.name, _fields(ids), what, text
            )

    def test_path(self, flag: str, path: str) -> bool | None:
        """``test <flag> <path>`` on the host over the SSH link; None when it cannot tell."""
        return self._carrier.link().test_path(flag, path)

    def read_host_file(self, path: str, *, limit: int = 1 << 20) -> str | None:
        """The host's file ``path`` over the SSH link; None when it cannot tell."""
        return self._carrier.link().read_text(path, limit=limit)

    def connection(self) -> Any:
        """The live libvirt connection, dialling (SSH, bridge, libvirt) when needed; inside
        ``lane()``, the calling thread's lane's connection over the same link."""
        with self._lock:
            if self._conn is not None and self._carrier.alive() and self._alive(self._conn):
                main = self._conn
            else:
                if self._conn is not None:
                    self._drop(self._conn, reason="connection found dead before a call")
                main = self._conn = self._dial()
            lane = self._lanes.current()
            if lane is None:
                return main
        return self._lane_connection(lane)

    def _lane_connection(self, lane: Lane) -> Any:
        """The lane's live connection, dialled under the lane's own lock rather than the
        session's, so that a host's lanes dial at the same time: each open is a few round
        trips over the link, and one that waits out a delayed ACK (about 40 ms) would hold
        up every lane after it."""
        with lane.dialling:
            conn = lane.conn
            if conn is not None and self._alive(conn):
                return conn
            bridge = self._carrier.bridge
            if bridge is None:  # an abort on another thread closed the link
                raise TransientError("the libvirt link closed meanwhile", host=self.host.name)
            conn = self._open(bridge, time.monotonic(), lane="yes")
            if self._carrier.bridge is not bridge:  # torn down while this lane dialled
                raise TransientError("the libvirt link closed meanwhile", host=self.host.name)
            lane.conn = conn
            return conn

    def dial_ahead(self) -> None:
        """Start dialling without waiting (the ``ssh`` child's handshake runs while the
        caller goes on); the next call waits for it. Nothing when connected, or when the
        transport has nothing to start ahead. Never raises: the dial says what failed."""
        with self._lock:
            if self._conn is None:
                with contextlib.suppress(HostError):
                    self._carrier.start_ahead()

    def owners(self) -> OwnerCache | None:
        """With ``watch``: the owners known on the live connection (dialling when needed;
        a new connection starts with none and registers its callbacks, 2 RPCs). None
        without ``watch``, or when libvirtd refused the callbacks on this connection.
        Raises what a call raises (the link failing)."""
        if not self._watch:
            return None
        with self._lock:  # the registration succeeds under the lock: ``conn`` is still ours
            conn = self.connection()
            return self._owners.on(
                conn, lambda watch: self.call("virConnectDomainEventRegisterAny", watch)
            )

    def owner_changed(self, uuid: str) -> None:
        """We changed the domain's owner: the known one is stale from now on."""
        self._owners.changed(uuid)

    def lane(self) -> AbstractContextManager[object]:
        """Inside, the calling thread's calls go over a lane: a connection of its own on
        the same link, shared by at most ``CALLS_PER_LANE`` threads
        (reconciler.adapters.hypervisor.transport.lanes), so that more calls than libvirtd serves on
        one connection run at once. Objects a call returns (a domain, a volume) keep
        their connection: use them inside the same ``lane()``."""
        return self._lanes.held()

    @property
    def lanes_dialled(self) -> int:
        """Lanes holding a connection now (for tests and the debug log)."""
        return self._lanes.dialled()

    def close(self) -> None:
        with self._lock:
            self._teardown()

    def close_at_exit(self) -> None:
        """``close`` for the interpreter's exit: never waits long for a call in flight."""
        if self._lock.acquire(timeout=EXIT_LOCK_WAIT):
            try:
                self._teardown()
            finally:
                self._lock.release()
            return
        dropped = [self._conn, *self._lanes.forget()]  # closed after the link (_teardown)
        self._conn = None
        self._owners.forget()
        try:
            self._carrier.cut()
        finally:
            del dropped

    def _dial(self) -> Any:
        """Open libvirt through the carrier. A failed ``ssh`` child is closed and the
        paramiko link says why (``Carrier.after_child_failed``), unless the child reached
        no SSH server at all (``SshUnreachable``): the link would only wait as long again."""
        started = time.monotonic()
        bridge = self._carrier.start()
        if not isinstance(bridge, OpenSshForward):
            return self._open(bridge, started, lane="")
        try:
            return self._open(bridge, started, lane="")
        except SshUnreachable:
            self._teardown()
            raise
        except TransientError as exc:
            self._teardown()
            failed = exc
        return self._open(self._carrier.after_child_failed(failed), started, lane="")

    def _open(self, bridge: SocketBridge | OpenSshForward, started: float, *, lane: str) -> Any:
        """``virConnectOpen`` through ``bridge``; on failure the link is torn down and the
        error is a TransientError."""
        bridge.prepare()
        deadline = Deadline(self._settings.connect_timeout, lambda: self._abort(None, "open"))
        deadline.arm()
        try:
            conn = self._open_connection(bridge.uri)
        except libvirt.libvirtError as exc:
            helper = bridge.stderr_tail.strip()
            with self._lock:  # a lane dials without it
                if self._carrier.bridge is bridge:
                    self._teardown()
            detail = f"; remote helper said: {helper}" if helper else ""
            error = classify(exc, host=self.host.name, rpc="virConnectOpen", link_alive=False)
            self._record("virConnectOpen", started, ok=False, ids={}, extra=_codes(error))
            raise TransientError(
                f"libvirt connection through SSH failed: {error}{detail}",
                host=self.host.name,
                rpc="virConnectOpen",
                code=error.code,
                code_name=error.code_name,
            ) from exc
        finally:
            deadline.cancel()
        self._record("virConnectOpen", started, ok=True, ids={"via": self.via, "lane": lane})
        return conn

    def _alive(self, conn: Any) -> bool:
        try:
            return bool(conn.isAlive())
        except libvirt.libvirtError:
            return False

    def _abort(self, conn: Any, rpc: str) -> None:
        """Deadline expired: cut the link so the blocked call returns (``Carrier.cut``,
        without the session lock, which the caller may hold); the next call finds it
        dead and redials."""
        log.warning(
            "host %s: %s got no answer in time; dropping the connection", self.host.name, rpc
        )
        if conn is None or conn is self._conn or self._lanes.owns(conn):
            self._carrier.cut()

    def _drop(self, conn: Any, *, reason: str) -> None:
        with self._lock:
            if conn is self._conn or self._lanes.owns(conn):
                log.info("host %s: dropping libvirt connection: %s", self.host.name, reason)
                self._teardown()

    def _teardown(self) -> None:
        # The virConnect objects are only forgotten, not closed: another thread
        # may still be inside a call on one; each closes when its last reference
        # goes. Closing the SSH link makes any such call return at once. This
        # method's own references go only after the link closed, so that their
        # close finds the socket gone instead of making a round trip each, one
        # after the other (a round trip that waits out a delayed ACK takes 40 ms).
        dropped = [self._conn, *self._lanes.forget()]
        self._conn = None
        owners = self._owners.forget()
        try:
            self._carrier.close()
        finally:
            if owners is not None:  # after the link closed: the RPC fails at once, if at all
                owners.stop()
            del dropped

    def _failed(
        self,
        rpc: str,
        exc: libvirt.libvirtError,
        started: float,
        *,
        alive: bool,
        ids: dict[str, object],
    ) -> HostError:
        error = classify(exc, host=self.host.name, rpc=rpc, link_alive=alive)
        self._record(rpc, started, ok=False, ids=ids, extra=_codes(error))
        return error

    def _record(
        self, rpc: str, started: float, *, ok: bool, ids: dict[str, object], extra: str = ""
    ) -> None:
        seconds = time.monotonic() - started
        if log.isEnabledFor(logging.DEBUG):
            parts = [f"rpc={rpc}", f"host={self.host.name}", _fields(ids)]
            parts.append(f"duration_ms={seconds * 1000:.1f}")
            if extra:
                parts.append(extra)
            log.debug(" ".join(p for p in parts if p))
        if self._observer is not None:
            self._observer(rpc, self.host.name, seconds, ok)


def _codes(error: HostError) -> str:
    return f"libvirt_code={error.code} libvirt_error={error.code_name}"


_OPEN: weakref.WeakSet[LibvirtSession] = weakref.WeakSet()


@atexit.register
def _close_open_sessions() -> None:
    """Close the sessions a process left open as it exits.

    The SSH bridge's threads are daemon threads: past the exit hooks they stop, and the
    libvirt connection, closed when it is collected during shutdown, would then wait
    forever for the answer to its close call. Closing while the bridge still runs lets
    a process that never closed its hosts (an unexpected exception) exit.
    """
    for session in list(_OPEN):
        session.close_at_exit()
