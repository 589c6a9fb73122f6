"""The endpoint's connections: one bound on every accepted socket, and who gives way.

One thread owns every connection from ``accept`` to ``close`` and never blocks on a
client: it reads requests (``Incoming``) and writes answers without blocking, through
one selector. Answers are made elsewhere (``on_request``, the endpoint's workers) and
handed back with ``reply``. What a client can make the daemon hold is bounded:

- every accepted socket counts against ``max_connections``, whatever it is doing:
  sending its request, waiting for or being answered, or taking its answer;
- a request must be complete within ``read_timeout`` of the accept, and an answer must
  be taken within ``write_timeout`` of being ready; past either the connection is
  dropped (with a reset when an answer is left unsent: the kernel keeps none of it);
- at the bound, a new connection takes the slot of the oldest connection that is
  wasting one: still sending its request, or not taking its answer. When every slot
  holds a request being answered, the listening socket is not polled until a slot
  frees: new clients wait in the kernel's backlog (no descriptor of ours) for an
  instant, the time the workers take to answer, rather than being turned away;
- when ``accept`` fails for want of descriptors or memory (EMFILE and the like), the
  listening socket is not polled for a while (0.05 s, doubling to 1 s while it lasts)
  and the failure is logged at most once per ``refused_log_interval``.

The descriptors it holds: at most ``max_connections``, plus the listening socket, the
selector and a socket pair that wakes the thread when an answer is ready.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import logging
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from http import HTTPStatus

from reconciler.adapters.surface.httprequest import Head, Incoming, Request
from reconciler.adapters.surface.ratelog import RateLimitedLog
from reconciler.model.settings import ListenSettings

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20
OWN_DESCRIPTORS = 4
"""Descriptors the listener holds besides its connections (listening socket, selector,
wake-up pair)."""
_OUT_OF_DESCRIPTORS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_BACKOFF_FIRST = 0.05
_BACKOFF_MAX = 1.0
_ABORT = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close sends a reset


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """Bounds on what clients of the endpoint can make the daemon hold."""

    read_timeout: float = 10.0
    """Seconds from accepting a connection to having its whole request (head and body)."""
    write_timeout: float = 5.0
    """Seconds a client has to take its whole answer once it is ready; then it is dropped."""
    max_connections: int = 64
    """Sockets accepted and not yet closed, whatever they are doing (file descriptors)."""
    workers: int = 4
    """Threads answering complete requests."""
    max_head_bytes: int = 16 * 1024
    """Bytes of request line and headers."""
    max_body: int = MAX_BODY
    """Bytes of a POST body."""
    refused_log_interval: float = 60.0
    """Seconds between two log lines about refused hooks, or about failing accepts."""
    send_buffer: int = 64 * 1024
    """Bytes of an answer the kernel may hold for a client (``SO_SNDBUF``): what a client
    that does not read leaves behind in the kernel; the rest stays here until the deadline."""
    metrics_max_age: float = 1.0
    """Seconds one rendering of /metrics answers further requests for."""


class Stage(Enum):
    READING = "reading"
    ANSWERING = "answering"
    WRITING = "writing"


@dataclass(eq=False)
class Connection:
    """One accepted socket, from its accept to its close."""

    sock: socket.socket
    incoming: Incoming
    accepted: float
    stage: Stage = Stage.READING
    deadline: float = 0.0
    out: memoryview = field(default_factory=lambda: memoryview(b""))
    closed: bool = False

    @property
    def peer(self) -> str:
        return self.incoming.peer


class Listener:
    """The listening socket and its connections; ``start`` serves in a thread of its own."""

    def __init__(
        self,
        listen: ListenSettings,
        limits: ListenerLimits,
        *,
        on_request: Callable[[Connection, Request | HTTPStatus], None],
        digest_for: Callable[[Head], hmac.HMAC | None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limits = limits
        self._on_request = on_request
        self._digest_for = digest_for
        self._clock = clock
        family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
        self._sock = socket.create_server((listen.host, listen.port), family=family)
        self._sock.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._polling = False
        self._conns: dict[int, Connection] = {}
        self._replies: deque[tuple[Connection, bytes]] = deque()
        self._buffer = bytearray(65536)  # every read lands here: nothing is allocated per read
        self._view = memoryview(self._buffer)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="http", daemon=True)
        self._backoff_until: float | None = None
        self._backoff = _BACKOFF_FIRST
        self._accept_failures = RateLimitedLog(
            log,
            limits.refused_log_interval,
            clock,
            suffix=" (%d more such failures since the last such line)",
        )
        self.evicted = 0
        """Connections closed to make room for a new one."""
        self.dropped = 0
        """Connections closed at their read or write deadline."""
        self.paused = 0
        """Times the listening socket was left unpolled (all slots answering, or EMFILE)."""
        self._poll_listener(True)

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._sock.getsockname()[:2]
        return str(host), int(port)

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for conn in list(self._conns.values()):
            self._close(conn)
        self._selector.close()
        for sock in (self._sock, self._wake_r, self._wake_w):
            sock.close()

    def reply(self, conn: Connection, answer: bytes) -> None:
        """Send ``answer`` on ``conn`` and close it (any thread; the loop does the writing)."""
        self._replies.append((conn, answer))
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            self._wake_w.send(b"\0")

    # -- the loop -----------------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            listener_ready = False
            for key, mask in self._selector.select(timeout=self._timeout()):
                if key.fileobj is self._sock:
                    listener_ready = True
                elif key.fileobj is self._wake_r:
                    with contextlib.suppress(BlockingIOError):
                        self._wake_r.recv(4096)
                else:
                    self._guarded(key.data, mask)
            self._send_replies()
            if listener_ready:  # after the reads: a request already sent is taken first
                self._accept()
            self._expire()

    def _timeout(self) -> float:
        if self._backoff_until is None:
            return 0.1
        return min(0.1, max(0.0, self._backoff_until - self._clock()))

    def _guarded(self, conn: Connection, mask: int) -> None:
        try:
            if mask & selectors.EVENT_READ:
                self._read(conn)
            elif mask & selectors.EVENT_WRITE:
                self._write(conn)
        except Exception as exc:  # one client must not end the thread that serves them all
            log.error("Serving an HTTP client at %s failed: %s", conn.peer, exc, exc_info=True)
            self._close(conn)

    # -- accepting ----------------------------------------------------------

    def _accept(self) -> None:
        for _ in range(max(1, self._limits.max_connections // 4)):
            if len(self._conns) >= self._limits.max_connections:
                victim = self._victim()
                if victim is None:  # every slot is being answered: wait for one to free
                    self._poll_listener(False)
                    self.paused += 1
                    return
                self._close(victim)  # if no client turns out to wait, it went a bit early
                self.evicted += 1
            try:
                sock, address = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:
                self._accept_failed(exc)
                return
            self._backoff = _BACKOFF_FIRST
            sock.setblocking(False)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._limits.send_buffer)
            incoming = Incoming(
                str(address[0]),
                max_head_bytes=self._limits.max_head_bytes,
                max_body=self._limits.max_body,
                digest_for=self._digest_for,
            )
            conn = Connection(sock, incoming, self._clock())
            self._conns[sock.fileno()] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _victim(self) -> Connection | None:
        """The oldest connection wasting a slot: still sending, or not taking its answer."""
        wasting = [c for c in self._conns.values() if c.stage is not Stage.ANSWERING]
        return min(wasting, key=lambda c: c.accepted) if wasting else None

    def _accept_failed(self, exc: OSError) -> None:
        delay = self._backoff
        self._backoff = min(_BACKOFF_MAX, delay * 2)
        if exc.errno in _OUT_OF_DESCRIPTORS:
            self._backoff_until = self._clock() + delay
            self._poll_listener(False)
            self.paused += 1
        self._accept_failures.log(
            "Accepting an HTTP connection failed: %s; not accepting for %.2f s.", exc, delay
        )

    def _poll_listener(self, on: bool) -> None:
        if on and not self._polling:
            self._selector.register(self._sock, selectors.EVENT_READ)
        elif not on and self._polling:
            self._selector.unregister(self._sock)
        self._polling = on

    # -- reading and writing ------------------------------------------------

    def _read(self, conn: Connection) -> None:
        try:
            n = conn.sock.recv_into(self._buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(conn)
            return
        if not n:
            self._close(conn)
            return
        if not conn.incoming.feed(self._view[:n]):
            return
        outcome = conn.incoming.outcome
        assert outcome is not None
        self._selector.unregister(conn.sock)
        conn.stage = Stage.ANSWERING
        self._on_request(conn, outcome)

    def _send_replies(self) -> None:
        while self._replies:
            conn, answer = self._replies.popleft()
            if conn.closed:
                continue
            conn.stage = Stage.WRITING
            conn.out = memoryview(answer)
            conn.deadline = self._clock() + self._limits.write_timeout
            self._write(conn)
            if not conn.closed:
                self._selector.register(conn.sock, selectors.EVENT_WRITE, conn)
                self._resume()  # a client that does not take its answer may give way

    def _write(self, conn: Connection) -> None:
        try:
            sent = conn.sock.send(conn.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.debug("Answering %s failed: %s", conn.peer, exc)
            self._close(conn)
            return
        conn.out = conn.out[sent:]
        if not conn.out:
            self._close(conn)

    def _expire(self) -> None:
        now = self._clock()
        read_by = now - self._limits.read_timeout
        for conn in list(self._conns.values()):
            late = (conn.stage is Stage.READING and conn.accepted < read_by) or (
                conn.stage is Stage.WRITING and conn.deadline < now
            )
            if late:
                self._close(conn)
                self.dropped += 1
        if self._backoff_until is not None and now >= self._backoff_until:
            self._backoff_until = None
            self._poll_listener(True)

    def _close(self, conn: Connection) -> None:
        """Close ``conn``; with a reset if an answer is left unsent, which the kernel would
        otherwise keep trying to deliver to a client that does not read."""
        if conn.closed:
            return
        conn.closed = True
        self._conns.pop(conn.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(conn.sock)
        if conn.out:
            with contextlib.suppress(OSError):
                conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _ABORT)
        conn.sock.close()
        self._resume()  # a slot is free

    def _resume(self) -> None:
        if self._backoff_until is None and not self._stopping.is_set():
            self._poll_listener(True)
