"""``python tests/httpserve.py METRICS_BYTES NOFILE [fill]``: the HTTP endpoint alone, as a
process of its own, for tests that need its descriptors counted or exhausted.

It serves /metrics (METRICS_BYTES bytes), /healthz and /hook with the default
``ListenerLimits``, its open-file limit set to NOFILE (``LimitNOFILE`` emulated), logs to
stderr and prints ``port <n>`` once listening. ``fill``: then opens /dev/null until no
descriptor is left (a daemon whose other parts hold them all) and prints ``full``. A line
``release`` on stdin closes those and prints ``released``; end of input stops it.
"""

from __future__ import annotations

import logging
import os
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from reconciler.adapters.surface.httpapi import HttpApi
from reconciler.model.settings import ListenSettings
from reconciler.ports.surface import Endpoints


def main(metrics_bytes: int, nofile: int, fill: bool) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
    body = b"#" * (metrics_bytes - 1) + b"\n"
    endpoints = Endpoints(
        metrics=lambda: body,
        metrics_content_type="text/plain",
        health=lambda: (True, "ok"),
        hook=lambda: None,
        secret=lambda: b"s3cret",
    )
    api = HttpApi(ListenSettings("127.0.0.1", 0), endpoints)
    api.start()
    print(f"port {api.address[1]}", flush=True)
    fillers: list[int] = []
    if fill:
        while True:
            try:
                fillers.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                break
        print("full", flush=True)
    for line in sys.stdin:
        if line.strip() == "release":
            for fd in fillers:
                os.close(fd)
            fillers.clear()
            print("released", flush=True)
    api.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:] == ["fill"]))
