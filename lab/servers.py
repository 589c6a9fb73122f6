"""The lab's two small HTTP servers.

``images``: serves the image cache read-only on 127.0.0.1 so the daemon downloads the guest
image over its real HTTP path. ``probe``: runs inside each host namespace and answers
``/generate_204`` with 204, so the proxies' health probes never leave the lab.

    python -m lab.servers images --root DIR --port 18787
    python -m lab.servers probe --port 80
"""

from __future__ import annotations

import argparse
import functools
import http.server
import signal
import sys
from typing import Any


class _Quiet(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return


class _Probe(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        status = 204 if self.path.split("?")[0] == "/generate_204" else 404
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET

    def log_message(self, format: str, *args: Any) -> None:
        return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.servers")
    sub = parser.add_subparsers(dest="which", required=True)
    images = sub.add_parser("images")
    images.add_argument("--root", required=True)
    images.add_argument("--bind", default="127.0.0.1")
    images.add_argument("--port", type=int, required=True)
    probe = sub.add_parser("probe")
    probe.add_argument("--bind", default="0.0.0.0")
    probe.add_argument("--port", type=int, default=80)
    args = parser.parse_args(argv)
    handler: Any = _Probe
    if args.which == "images":
        handler = functools.partial(_Quiet, directory=args.root)
    http.server.ThreadingHTTPServer.daemon_threads = True
    server = http.server.ThreadingHTTPServer((args.bind, args.port), handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
