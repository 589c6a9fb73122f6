"""A real git remote over HTTP on loopback that wants a user and token: ``git http-backend``
behind Basic auth, the way a forge serves https clones (without TLS)."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

PORTS = range(19300, 19400)
"""This suite's share of loopback ports (one server at a time takes the first free one)."""


class _Handler(BaseHTTPRequestHandler):
    server: _GitServer

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        if self.headers.get("Authorization", "") != self.server.expected:
            self.server.refused += 1
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="fleet"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "GIT_PROJECT_ROOT": str(self.server.root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": path,
            "QUERY_STRING": query,
            "REQUEST_METHOD": self.command,
            "CONTENT_TYPE": self.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(length),
            "REMOTE_USER": "fleet",
            "REMOTE_ADDR": "127.0.0.1",
        }
        git = shutil.which("git") or "git"
        done = subprocess.run([git, "http-backend"], input=body, env=env, capture_output=True)
        head, _, payload = done.stdout.replace(b"\r\n", b"\n").partition(b"\n\n")
        headers = [line.split(b":", 1) for line in head.split(b"\n") if b":" in line]
        status = next((v.strip() for k, v in headers if k.lower() == b"status"), b"200")
        self.send_response(int(status.split()[0]))
        for key, value in headers:
            if key.lower() != b"status":
                self.send_header(key.decode(), value.strip().decode())
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _GitServer(ThreadingHTTPServer):
    def __init__(self, port: int, root: Path, user: str, token: str) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.root = root
        self.expected = "Basic " + base64.b64encode(f"{user}:{token}".encode()).decode()
        self.refused = 0


@contextmanager
def serving(root: Path, *, user: str, token: str) -> Iterator[_GitServer]:
    """Serve the bare repositories below ``root`` at ``http://127.0.0.1:PORT/NAME``."""
    server = None
    for port in PORTS:
        try:
            server = _GitServer(port, root, user, token)
            break
        except OSError:
            continue
    assert server is not None, f"no free loopback port in {PORTS}"
    thread = threading.Thread(target=server.serve_forever, name="git-http", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
