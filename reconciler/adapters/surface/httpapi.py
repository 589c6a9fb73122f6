"""The daemon's HTTP endpoint: GET /metrics, GET /healthz, GET /sd/proxies, POST /hook.

Whoever can reach the listen address can send anything, as slowly as they
like, from as many connections as they like. So the endpoint is built to stay
small whatever arrives:

- one thread reads every connection without blocking (``selectors``) until
  its request is complete; a half-sent request costs a socket and a buffer,
  never a thread;
- a request must be complete within ``ListenerLimits.read_timeout`` seconds
  of the connection, head and body together, or the connection is closed;
- at most ``max_connections`` are open: a new connection past that evicts the
  oldest one still sending, so a flood cannot lock out a probe or a hook;
- complete requests are answered by ``workers`` threads (the routes are
  quick), one request per connection (``Connection: close``);
- heads over ``max_head_bytes``, bodies over ``max_body``, chunked bodies
  (``Transfer-Encoding``), a missing or malformed ``Content-Length`` on POST
  and malformed request lines are refused with a 4xx and nothing else;
- refused hooks are logged at most once per ``refused_log_interval``, with
  the count of those not logged.

/hook accepts a push notification only with a valid GitHub/Gitea-style
``X-Hub-Signature-256: sha256=<hex>`` HMAC-SHA256 of the body, compared in
constant time; anything else is 401 and triggers nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import queue
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus

from reconciler.model.settings import ListenSettings

log = logging.getLogger(__name__)

MAX_BODY = 1 << 20
SIGNATURE_HEADER = "X-Hub-Signature-256"


def sign(secret: bytes, body: bytes) -> str:
    """The header value a sender computes: ``sha256=<hex>``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signature_valid(secret: bytes, body: bytes, header: str | None) -> bool:
    if not secret or not header:
        return False
    return hmac.compare_digest(sign(secret, body).encode(), header.strip().lower().encode())


@dataclass(frozen=True, slots=True)
class Endpoints:
    """What the routes call. ``secret`` returns None when the webhook is off."""

    metrics: Callable[[], bytes]
    metrics_content_type: str
    health: Callable[[], tuple[bool, str]]
    hook: Callable[[], None]
    secret: Callable[[], bytes | None]
    targets: Callable[[], bytes] = field(default=lambda: b"[]\n")
    """GET /sd/proxies: the proxies as Prometheus ``http_sd_configs`` JSON."""


@dataclass(frozen=True, slots=True)
class ListenerLimits:
    """Bounds on what clients of the endpoint can make the daemon hold."""

    read_timeout: float = 10.0
    """Seconds from accepting a connection to having its whole request (head and body)."""
    write_timeout: float = 10.0
    """Seconds an answer may take to send."""
    max_connections: int = 64
    """Connections open at once (file descriptors); past it the oldest pending one goes."""
    workers: int = 4
    """Threads answering complete requests."""
    max_head_bytes: int = 16 * 1024
    """Bytes of request line and headers."""
    max_body: int = MAX_BODY
    """Bytes of a POST body."""
    refused_log_interval: float = 60.0
    """Seconds between two log lines about refused hooks."""


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: str


@dataclass
class _Pending:
    sock: socket.socket
    peer: str
    accepted: float
    data: bytearray = field(default_factory=bytearray)


class HttpApi:
    """The endpoint; ``start`` serves in the background, ``stop`` closes everything."""

    def __init__(
        self,
        listen: ListenSettings,
        endpoints: Endpoints,
        *,
        limits: ListenerLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._endpoints = endpoints
        self._limits = limits if limits is not None else ListenerLimits()
        self._clock = clock
        family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
        self._listener = socket.create_server((listen.host, listen.port), family=family)
        self._listener.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._pending: dict[int, _Pending] = {}
        self._work: queue.Queue[tuple[socket.socket, Request | HTTPStatus] | None] = queue.Queue()
        self._stopping = threading.Event()
        self._refusals = _RateLimited(self._limits.refused_log_interval, clock)
        self._thread = threading.Thread(target=self._loop, name="http", daemon=True)
        self._workers = [
            threading.Thread(target=self._serve, name=f"http-{n}", daemon=True)
            for n in range(self._limits.workers)
        ]
        self.evicted = 0
        """Connections closed to make room (a flood), for tests and logs."""

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._listener.getsockname()[:2]
        return str(host), int(port)

    @property
    def open_connections(self) -> int:
        return len(self._pending)

    def start(self) -> None:
        self._thread.start()
        for worker in self._workers:
            worker.start()
        log.info("Listening on %s:%d for /metrics, /healthz, /sd/proxies and /hook.", *self.address)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        for _ in self._workers:
            self._work.put(None)
        for worker in self._workers:
            if worker.is_alive():
                worker.join(timeout=5)
        for pending in list(self._pending.values()):
            self._close(pending)
        self._selector.close()
        self._listener.close()

    # -- the reading thread -------------------------------------------------

    def _loop(self) -> None:
        while not self._stopping.is_set():
            for key, _ in self._selector.select(timeout=0.1):
                if key.fileobj is self._listener:
                    self._accept()
                else:
                    pending = self._pending.get(key.fd)
                    if pending is not None:
                        self._read_guarded(pending)
            self._expire()

    def _read_guarded(self, pending: _Pending) -> None:
        try:
            self._read(pending)
        except Exception as exc:  # one client's request must not end the reading thread
            log.error(
                "Reading an HTTP request from %s failed: %s", pending.peer, exc, exc_info=True
            )
            self._close(pending)

    def _accept(self) -> None:
        for _ in range(self._limits.max_connections):
            try:
                sock, address = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE and the like: the next round may succeed
                log.warning("Accepting an HTTP connection failed: %s", exc)
                return
            if len(self._pending) >= self._limits.max_connections:
                oldest = min(self._pending.values(), key=lambda p: p.accepted)
                self._close(oldest)
                self.evicted += 1
            sock.setblocking(False)
            pending = _Pending(sock, str(address[0]), self._clock())
            self._pending[sock.fileno()] = pending
            self._selector.register(sock, selectors.EVENT_READ)

    def _read(self, pending: _Pending) -> None:
        try:
            chunk = pending.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(pending)
            return
        if not chunk:
            self._close(pending)
            return
        pending.data += chunk
        outcome = _parse(bytes(pending.data), pending.peer, self._limits)
        if outcome is None:
            return
        self._selector.unregister(pending.sock)
        del self._pending[pending.sock.fileno()]
        self._work.put((pending.sock, outcome))

    def _expire(self) -> None:
        deadline = self._clock() - self._limits.read_timeout
        for pending in [p for p in self._pending.values() if p.accepted < deadline]:
            self._close(pending)

    def _close(self, pending: _Pending) -> None:
        self._pending.pop(pending.sock.fileno(), None)
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(pending.sock)
        pending.sock.close()

    # -- the workers --------------------------------------------------------

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            sock, outcome = item
            try:
                status, body, ctype = self._answer(outcome)
                sock.setblocking(True)
                sock.settimeout(self._limits.write_timeout)
                sock.sendall(_response(status, body, ctype))
            except OSError as exc:
                log.debug("Answering an HTTP request failed: %s", exc)
            except Exception as exc:  # a bug in a route must not take the endpoint down
                log.error("An HTTP route failed: %s", exc, exc_info=True)
            finally:
                sock.close()

    def _answer(self, outcome: Request | HTTPStatus) -> tuple[HTTPStatus, bytes, str]:
        if isinstance(outcome, HTTPStatus):
            return outcome, f"{outcome.phrase.lower()}\n".encode(), "text/plain"
        request = outcome
        path = request.path.split("?", 1)[0]
        if request.method == "GET" and path == "/metrics":
            ep = self._endpoints
            return HTTPStatus.OK, ep.metrics(), ep.metrics_content_type
        if request.method == "GET" and path == "/healthz":
            ok, text = self._endpoints.health()
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            return status, (text + "\n").encode(), "text/plain"
        if request.method == "GET" and path == "/sd/proxies":
            return HTTPStatus.OK, self._endpoints.targets(), "application/json"
        if request.method == "POST" and path == "/hook":
            return self._hook(request)
        if path in ("/metrics", "/healthz", "/sd/proxies", "/hook"):
            return HTTPStatus.METHOD_NOT_ALLOWED, b"method not allowed\n", "text/plain"
        return HTTPStatus.NOT_FOUND, b"not found\n", "text/plain"

    def _hook(self, request: Request) -> tuple[HTTPStatus, bytes, str]:
        secret = self._endpoints.secret()
        if secret is None:
            return HTTPStatus.NOT_FOUND, b"webhook not configured\n", "text/plain"
        header = request.headers.get(SIGNATURE_HEADER.lower())
        if not signature_valid(secret, request.body, header):
            self._refusals.log("Webhook from %s refused: bad or missing signature.", request.peer)
            return HTTPStatus.UNAUTHORIZED, b"bad or missing signature\n", "text/plain"
        self._endpoints.hook()
        return HTTPStatus.ACCEPTED, b"reconcile queued\n", "text/plain"


def _parse(data: bytes, peer: str, limits: ListenerLimits) -> Request | HTTPStatus | None:
    """The request in ``data``; a status to refuse it with; None while it is incomplete."""
    too_large = HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return too_large if len(data) > limits.max_head_bytes else None
    if end > limits.max_head_bytes:
        return too_large
    try:
        lines = data[:end].decode("ascii").split("\r\n")
    except UnicodeDecodeError:
        return HTTPStatus.BAD_REQUEST
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1.") or not parts[1].startswith("/"):
        return HTTPStatus.BAD_REQUEST
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return HTTPStatus.BAD_REQUEST
        key = name.lower()
        if key in headers and key in ("content-length", "transfer-encoding"):
            return HTTPStatus.BAD_REQUEST
        headers[key] = value.strip()
    if "transfer-encoding" in headers:
        return HTTPStatus.LENGTH_REQUIRED  # chunked bodies are refused: send Content-Length
    method = parts[0]
    length_text = headers.get("content-length")
    if length_text is None:
        if method == "POST":
            return HTTPStatus.LENGTH_REQUIRED
        length = 0
    elif not length_text.isdigit() or len(length_text) > 12:
        return HTTPStatus.BAD_REQUEST
    else:
        length = int(length_text)
    if length > limits.max_body:
        return HTTPStatus.REQUEST_ENTITY_TOO_LARGE
    body = data[end + 4 :]
    if len(body) < length:
        return None
    if len(body) > length:
        return HTTPStatus.BAD_REQUEST  # one request per connection; nothing may follow
    return Request(method, parts[1], headers, bytes(body), peer)


def _response(status: HTTPStatus, body: bytes, ctype: str) -> bytes:
    head = (
        f"HTTP/1.1 {status.value} {status.phrase}\r\n"
        f"Server: proxyfleet\r\n"
        f"Content-Type: {ctype}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class _RateLimited:
    """Logs a warning at most once per ``interval``; says how many were left out."""

    def __init__(self, interval: float, clock: Callable[[], float]) -> None:
        self._interval = interval
        self._clock = clock
        self._lock = threading.Lock()
        self._last: float | None = None
        self._dropped = 0

    def log(self, message: str, *args: object) -> None:
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < self._interval:
                self._dropped += 1
                return
            dropped, self._dropped, self._last = self._dropped, 0, now
        if dropped:
            log.warning(message + " (%d more refused since the last such line)", *args, dropped)
        else:
            log.warning(message, *args)
