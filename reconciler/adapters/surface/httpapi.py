"""The daemon's HTTP endpoint: GET /metrics, GET /healthz, GET /sd/proxies, POST /hook.

Whoever can reach the listen address can send anything, as slowly as they
like, from as many connections as they like, and read the answers as slowly
as they like, or never. So the endpoint is built to stay small whatever
arrives:

- one thread (``httplistener.Listener``) holds every connection and never
  blocks on one: every accepted socket counts against ``max_connections``, a
  request must be in within ``read_timeout``, an answer taken within
  ``write_timeout``; a new connection past the bound takes the slot of the
  oldest one still sending or not reading; EMFILE pauses accepting;
- requests are read in one pass (``httprequest.Incoming``): heads over
  ``max_head_bytes``, bodies over ``max_body``, chunked bodies, a POST without
  ``Content-Length`` and malformed requests are refused with a 4xx;
- complete requests are answered by ``workers`` threads, /healthz first, then
  /hook, then /metrics; one rendering of /metrics answers every request for
  ``metrics_max_age`` seconds, so that a flood of scrapes costs one rendering a
  second;
- refused hooks are logged at most once per ``refused_log_interval``, with
  the count of those not logged.

/hook accepts a push notification only with a valid GitHub/Gitea-style
``X-Hub-Signature-256: sha256=<hex>`` HMAC-SHA256 of the body, compared in
constant time; anything else is 401 and triggers nothing. The HMAC is computed
as the body arrives, and only when the webhook is on and the header has the
form of a signature: a body without one is read and dropped unhashed.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import logging
import queue
import re
import threading
import time
from collections.abc import Callable
from http import HTTPStatus

from reconciler.adapters.surface.httplistener import Connection, Listener, ListenerLimits
from reconciler.adapters.surface.httprequest import Head, Request, response
from reconciler.adapters.surface.ratelog import RateLimitedLog
from reconciler.model.settings import ListenSettings
from reconciler.ports.surface import Endpoints

__all__ = ["SIGNATURE_HEADER", "HttpApi", "ListenerLimits", "sign", "signature_valid"]

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Hub-Signature-256"
_SIGNATURE_FORM = re.compile(r"sha256=[0-9a-f]{64}")
_FIRST = {"/healthz": 0, "/hook": 1}  # the rest (/metrics, refusals) come after these


def sign(secret: bytes, body: bytes) -> str:
    """The header value a sender computes: ``sha256=<hex>``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def signature_valid(secret: bytes, body: bytes, header: str | None) -> bool:
    if not secret or not header:
        return False
    return hmac.compare_digest(sign(secret, body).encode(), header.strip().lower().encode())


_Work = tuple[int, int, Connection | None, Request | HTTPStatus | None]


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
        self._listener = Listener(
            listen,
            self._limits,
            on_request=self._enqueue,
            digest_for=self._digest_for,
            clock=clock,
        )
        self._work: queue.PriorityQueue[_Work] = queue.PriorityQueue()
        self._order = itertools.count()
        self._refusals = RateLimitedLog(
            log,
            self._limits.refused_log_interval,
            clock,
            suffix=" (%d more refused since the last such line)",
        )
        self._metrics_lock = threading.Lock()
        self._metrics: tuple[float, bytes] | None = None
        self._workers = [
            threading.Thread(target=self._serve, name=f"http-{n}", daemon=True)
            for n in range(self._limits.workers)
        ]

    @property
    def address(self) -> tuple[str, int]:
        return self._listener.address

    @property
    def open_connections(self) -> int:
        """Accepted sockets not yet closed (reading, answering or writing)."""
        return self._listener.open_connections

    @property
    def evicted(self) -> int:
        """Connections closed to make room for a new one (a flood), for tests and logs."""
        return self._listener.evicted

    @property
    def dropped(self) -> int:
        """Connections closed at their read or write deadline."""
        return self._listener.dropped

    def start(self) -> None:
        self._listener.start()
        for worker in self._workers:
            worker.start()
        log.info("Listening on %s:%d for /metrics, /healthz, /sd/proxies and /hook.", *self.address)

    def stop(self) -> None:
        for _ in self._workers:
            self._work.put((99, next(self._order), None, None))
        for worker in self._workers:
            if worker.is_alive():
                worker.join(timeout=5)
        self._listener.stop()

    # -- what the listener asks ---------------------------------------------

    def _digest_for(self, head: Head) -> hmac.HMAC | None:
        """The HMAC a /hook body goes through as it arrives; None (read and dropped) when
        the webhook is off or the request carries nothing shaped like a signature."""
        if head.method != "POST" or head.path.split("?", 1)[0] != "/hook":
            return None
        header = head.headers.get(SIGNATURE_HEADER.lower(), "").strip().lower()
        if not _SIGNATURE_FORM.fullmatch(header):
            return None
        secret = self._endpoints.secret()
        return hmac.new(secret, digestmod=hashlib.sha256) if secret else None

    def _enqueue(self, conn: Connection, outcome: Request | HTTPStatus) -> None:
        path = outcome.path.split("?", 1)[0] if isinstance(outcome, Request) else ""
        self._work.put((_FIRST.get(path, 2), next(self._order), conn, outcome))

    # -- the workers --------------------------------------------------------

    def _serve(self) -> None:
        while True:
            _, _, conn, outcome = self._work.get()
            if conn is None or outcome is None:
                return
            try:
                answer = self._answer(outcome)
            except Exception as exc:  # a bug in a route must not take the endpoint down
                log.error("An HTTP route failed: %s", exc, exc_info=True)
                status = HTTPStatus.INTERNAL_SERVER_ERROR
                answer = response(status, b"internal error\n", "text/plain")
            self._listener.reply(conn, answer)

    def _answer(self, outcome: Request | HTTPStatus) -> bytes:
        if isinstance(outcome, HTTPStatus):
            return response(outcome, f"{outcome.phrase.lower()}\n".encode(), "text/plain")
        request = outcome
        path = request.path.split("?", 1)[0]
        if request.method == "GET" and path == "/metrics":
            return self._metrics_answer()
        if request.method == "GET" and path == "/healthz":
            ok, text = self._endpoints.health()
            status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
            return response(status, (text + "\n").encode(), "text/plain")
        if request.method == "GET" and path == "/sd/proxies":
            return response(HTTPStatus.OK, self._endpoints.targets(), "application/json")
        if request.method == "POST" and path == "/hook":
            status, body = self._hook(request)
            return response(status, body, "text/plain")
        if path in ("/metrics", "/healthz", "/sd/proxies", "/hook"):
            return response(HTTPStatus.METHOD_NOT_ALLOWED, b"method not allowed\n", "text/plain")
        return response(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def _metrics_answer(self) -> bytes:
        """The /metrics answer, rendered at most once per ``metrics_max_age``: renderings
        of a large fleet take tens of milliseconds, and anyone may ask for them."""
        with self._metrics_lock:
            cached = self._metrics
            if cached is not None and self._clock() - cached[0] < self._limits.metrics_max_age:
                return cached[1]
            started = self._clock()
            ep = self._endpoints
            answer = response(HTTPStatus.OK, ep.metrics(), ep.metrics_content_type)
            self._metrics = (started, answer)
            return answer

    def _hook(self, request: Request) -> tuple[HTTPStatus, bytes]:
        secret = self._endpoints.secret()
        if secret is None:
            return HTTPStatus.NOT_FOUND, b"webhook not configured\n"
        header = request.headers.get(SIGNATURE_HEADER.lower(), "").strip().lower()
        if request.digest is None or not hmac.compare_digest(
            request.digest.encode(), header.encode()
        ):
            self._refusals.log("Webhook from %s refused: bad or missing signature.", request.peer)
            return HTTPStatus.UNAUTHORIZED, b"bad or missing signature\n"
        self._endpoints.hook()
        return HTTPStatus.ACCEPTED, b"reconcile queued\n"
