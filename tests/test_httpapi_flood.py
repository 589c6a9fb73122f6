"""The HTTP endpoint under hostile clients: half-sent requests, floods, odd bodies (loopback)."""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemonutil import FakeCycle, http, running, wait_until

from reconciler.adapters.surface.httpapi import (
    SIGNATURE_HEADER,
    Endpoints,
    HttpApi,
    ListenerLimits,
    sign,
)
from reconciler.adapters.surface.metrics import Metrics
from reconciler.engine.daemon import Daemon
from reconciler.model.settings import DaemonSettings, ListenSettings, WebhookSettings

SECRET = b"s3cret"


class Calls:
    def __init__(self) -> None:
        self.hooks = threading.Event()
        self.count = 0

    def hook(self) -> None:
        self.count += 1
        self.hooks.set()


@pytest.fixture
def calls() -> Calls:
    return Calls()


def make_api(calls: Calls, **limits: float) -> HttpApi:
    endpoints = Endpoints(
        metrics=lambda: b"proxyfleet_up 1\n",
        metrics_content_type="text/plain",
        health=lambda: (True, "ok"),
        hook=calls.hook,
        secret=lambda: SECRET,
    )
    return HttpApi(
        ListenSettings(port=0),
        endpoints,
        limits=ListenerLimits(**limits),  # type: ignore[arg-type]
    )


@pytest.fixture
def api(calls: Calls) -> Iterator[HttpApi]:
    server = make_api(calls, read_timeout=3.0, max_connections=32)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def exchange(api: HttpApi, raw: bytes, timeout: float = 5.0) -> bytes:
    with socket.create_connection(api.address, timeout=timeout) as sock:
        sock.sendall(raw)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status_of(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer else 0


def hook_request(body: bytes = b'{"ref": "refs/heads/main"}') -> bytes:
    return (
        b"POST /hook HTTP/1.1\r\nHost: x\r\nContent-Length: "
        + str(len(body)).encode()
        + f"\r\n{SIGNATURE_HEADER}: {sign(SECRET, body)}\r\n\r\n".encode()
        + body
    )


def test_healthz_and_a_signed_hook_still_work_while_the_listener_is_flooded(
    api: HttpApi, calls: Calls
) -> None:
    threads_before = threading.active_count()
    flood: list[socket.socket] = []
    started = time.monotonic()
    try:
        for _ in range(400):  # bounded: 400 half-sent requests from loopback
            sock = socket.create_connection(api.address, timeout=5)
            sock.sendall(b"POST /hook HTTP/1.1\r\nContent-Length: 100\r\n")  # never finished
            flood.append(sock)
        time.sleep(0.3)
        assert api.open_connections <= 32
        assert threading.active_count() <= threads_before + 1
        health = exchange(api, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status_of(health) == 200 and health.endswith(b"ok\n")
        assert status_of(exchange(api, hook_request())) == 202
        assert calls.hooks.wait(2)
    finally:
        for sock in flood:
            sock.close()
    elapsed = time.monotonic() - started
    print(f"flood: 400 connections, evicted {api.evicted}, {elapsed:.2f} s")
    assert api.evicted >= 400 - 32
    assert elapsed < 20


def test_a_half_sent_request_is_dropped_after_the_read_timeout(calls: Calls) -> None:
    api = make_api(calls, read_timeout=0.5)
    api.start()
    try:
        with socket.create_connection(api.address, timeout=5) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\n")
            started = time.monotonic()
            assert sock.recv(100) == b""  # closed by the server, no answer
            assert 0.4 < time.monotonic() - started < 3
        assert api.open_connections == 0
    finally:
        api.stop()


def test_a_client_dribbling_bytes_is_cut_at_the_deadline_not_per_read(calls: Calls) -> None:
    api = make_api(calls, read_timeout=0.6)
    api.start()
    closed_after = None
    try:
        with socket.create_connection(api.address, timeout=5) as sock:
            started = time.monotonic()
            for byte in b"GET /healthz HTTP/1.1\r\nX-Slow: " + b"a" * 100:
                try:  # one byte every 50 ms: each read is quick, the request never ends
                    sock.sendall(bytes([byte]))
                    readable, _, _ = select.select([sock], [], [], 0.05)
                    if readable and sock.recv(1) == b"":
                        closed_after = time.monotonic() - started
                        break
                except OSError:
                    closed_after = time.monotonic() - started
                    break
    finally:
        api.stop()
    assert closed_after is not None and 0.5 < closed_after < 2.0


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"POST /hook HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", 411),
        (b"POST /hook HTTP/1.1\r\nHost: x\r\n\r\n", 411),
        (b"POST /hook HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST /hook HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
        (b"POST /hook HTTP/1.1\r\nContent-Length: 99999999\r\n\r\n", 413),
        (b"GARBAGE\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\nBad Header\r\n\r\n", 400),
        (b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n", 431),
        (b"GET /hook HTTP/1.1\r\n\r\n", 405),
        (b"GET /etc/passwd HTTP/1.1\r\n\r\n", 404),
    ],
)
def test_chunked_oversized_and_malformed_requests_are_refused(
    api: HttpApi, calls: Calls, raw: bytes, status: int
) -> None:
    assert status_of(exchange(api, raw)) == status
    assert calls.count == 0


def test_refused_hooks_are_logged_at_most_once_per_interval(
    api: HttpApi, caplog: pytest.LogCaptureFixture
) -> None:
    bad = b"POST /hook HTTP/1.1\r\nContent-Length: 2\r\nX-Hub-Signature-256: sha256=00\r\n\r\n{}"
    with caplog.at_level(logging.WARNING, logger="reconciler.adapters.surface.httpapi"):
        for _ in range(50):
            assert status_of(exchange(api, bad)) == 401
    refused = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refused) == 1


def test_a_flooded_daemon_keeps_its_loop_healthz_and_hook(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    settings = DaemonSettings(
        interval=3600,
        listen=ListenSettings("127.0.0.1", 0),
        webhook=WebhookSettings(secret_file=secret),
        state_dir=tmp_path / "state",
    )
    cycle = FakeCycle()
    daemon = Daemon(settings, cycle, metrics=Metrics(), handle_signals=False)
    flood: list[socket.socket] = []
    with running(daemon):
        assert wait_until(lambda: len(daemon.reports) == 1)
        try:
            for _ in range(300):
                sock = socket.create_connection(daemon.http.address, timeout=5)
                sock.sendall(b"GET /metrics HTTP/1.1\r\n")
                flood.append(sock)
            time.sleep(0.2)
            assert http(daemon, "/healthz")[0] == 200
            body = b'{"ref": "refs/heads/main"}'
            headers = {SIGNATURE_HEADER: sign(SECRET, body)}
            assert http(daemon, "/hook", body=body, headers=headers)[0] == 202
            assert wait_until(lambda: len(daemon.reports) == 2)
        finally:
            for sock in flood:
                sock.close()
