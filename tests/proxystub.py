"""A tiny forward proxy on 127.0.0.1 for the probe's tests: 204 for ``.../generate_204``,
500 for any other GET (``.../slow`` waits for ``release`` first), 403 for CONNECT; and
``serving``, which answers with any handler from a thread."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass
class ProxyStub:
    port: int
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)


@contextlib.contextmanager
def serve_proxy() -> Iterator[ProxyStub]:
    """Answers like a forward proxy: by the absolute URI in the request line."""
    stub = ProxyStub(port=0)

    class Handler(http.server.BaseHTTPRequestHandler):
        def _record(self) -> None:
            stub.requests.append((self.command, self.path, self.headers.get("Host", "")))

        def do_GET(self) -> None:
            self._record()
            if self.path.endswith("/slow"):
                stub.release.wait(10)
            status = 204 if self.path.endswith("/generate_204") else 500
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_CONNECT(self) -> None:
            self._record()
            self.send_response(403)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    with serving(Handler) as stub.port:
        try:
            yield stub
        finally:
            stub.release.set()


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """``handler`` answering on 127.0.0.1 from a thread; yields the port."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(
        target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield httpd.server_address[1]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)
