"""The daemon's HTTP endpoint: GET /metrics, GET /healthz, POST /hook.

``http.server.ThreadingHTTPServer`` from the standard library: three routes
and a few requests a minute do not justify a web framework, and a thread per
request keeps a slow scrape from delaying a webhook.

/hook accepts a push notification only with a valid GitHub/Gitea-style
``X-Hub-Signature-256: sha256=<hex>`` HMAC-SHA256 of the body, compared in
constant time; anything else is 401 and triggers nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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


class HttpApi:
    def __init__(self, listen: ListenSettings, endpoints: Endpoints) -> None:
        handler = _handler_class(endpoints)
        self._server = ThreadingHTTPServer((listen.host, listen.port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="http", kwargs={"poll_interval": 0.2}
        )

    @property
    def address(self) -> tuple[str, int]:
        host, port = self._server.server_address[:2]
        return str(host), int(port)

    def start(self) -> None:
        self._thread.start()
        log.info("Listening on %s:%d for /metrics, /healthz and /hook.", *self.address)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def _handler_class(endpoints: Endpoints) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "proxyfleet"
        sys_version = ""

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._reply(HTTPStatus.OK, endpoints.metrics(), endpoints.metrics_content_type)
            elif path == "/healthz":
                ok, text = endpoints.health()
                status = HTTPStatus.OK if ok else HTTPStatus.SERVICE_UNAVAILABLE
                self._reply(status, (text + "\n").encode())
            else:
                self._reply(HTTPStatus.NOT_FOUND, b"not found\n")

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != "/hook":
                self._reply(HTTPStatus.NOT_FOUND, b"not found\n")
                return
            secret = endpoints.secret()
            if secret is None:
                self._reply(HTTPStatus.NOT_FOUND, b"webhook not configured\n")
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY:
                self._reply(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, b"body too large\n")
                return
            body = self.rfile.read(length)
            if not signature_valid(secret, body, self.headers.get(SIGNATURE_HEADER)):
                log.warning(
                    "Webhook from %s refused: bad or missing signature.", self.client_address[0]
                )
                self._reply(HTTPStatus.UNAUTHORIZED, b"bad or missing signature\n")
                return
            endpoints.hook()
            self._reply(HTTPStatus.ACCEPTED, b"reconcile queued\n")

        def _reply(self, status: HTTPStatus, body: bytes, ctype: str = "text/plain") -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            log.debug("http %s " + format, self.client_address[0], *args)

    return Handler
