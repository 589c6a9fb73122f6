"""The HTTP endpoint under hostile clients: half-sent requests, floods, odd bodies (loopback)."""

from __future__ import annotations

import hmac
import logging
import select
import socket
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemonutil import FakeCycle, http, real_daemon, running, wait_until
from floodutil import (
    HEALTHZ_REQUEST,
    METRICS_REQUEST,
    cpu_seconds,
    descriptors,
    never_reading,
    served,
)

from reconciler.adapters.surface.httpapi import (
    SIGNATURE_HEADER,
    Endpoints,
    HttpApi,
    ListenerLimits,
    sign,
)
from reconciler.adapters.surface.metrics import Metrics
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


def make_api(calls: Calls, *, metrics: bytes = b"proxyfleet_up 1\n", **limits: float) -> HttpApi:
    endpoints = Endpoints(
        metrics=lambda: metrics,
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


def exchange(api: HttpApi | tuple[str, int], raw: bytes, timeout: float = 5.0) -> bytes:
    address = api.address if isinstance(api, HttpApi) else api
    with socket.create_connection(address, timeout=timeout) as sock:
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
    daemon = real_daemon(settings, cycle, metrics=Metrics(), handle_signals=False)
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


def test_clients_that_never_read_hold_no_worker_count_against_the_bound_and_are_dropped(
    calls: Calls,
) -> None:
    api = make_api(calls, metrics=b"#" * (4 << 20), workers=1, write_timeout=3.0)
    api.start()
    stuck: list[socket.socket] = []
    try:
        stuck = [never_reading(api.address, METRICS_REQUEST) for _ in range(3)]
        assert wait_until(lambda: api.open_connections == 3)  # counted while being answered
        health = exchange(api, HEALTHZ_REQUEST)  # the one worker is not held by the three
        assert status_of(health) == 200
        assert api.open_connections == 3
        assert wait_until(lambda: api.open_connections == 0, timeout=10)  # the write deadline
        assert api.dropped == 3
    finally:
        for sock in stuck:
            sock.close()
        api.stop()


def test_clients_that_never_read_keep_the_endpoint_within_its_bound_under_limit_nofile_1024(
    tmp_path: Path,
) -> None:
    """The issue's attack on its own: complete ``GET /metrics`` (1 MiB answers) from 1,100
    clients that never read, against the endpoint in a process limited to 1,024 files.
    Before, every one of them was queued and held (1,023 descriptors, EMFILE)."""
    bound = 64
    with served(tmp_path, metrics_bytes=1 << 20, nofile=1024) as server:
        baseline = descriptors(server.proc.pid)
        flood: list[socket.socket] = []
        samples: list[int] = []
        health: list[tuple[int, float]] = []
        try:
            for n in range(1100):
                try:
                    flood.append(never_reading(server.address, METRICS_REQUEST))
                except OSError:
                    break
                samples.append(descriptors(server.proc.pid))
                if n % 100 == 99:
                    started = time.monotonic()
                    try:
                        answer = status_of(exchange(server.address, HEALTHZ_REQUEST))
                    except OSError:
                        answer = 0
                    health.append((answer, time.monotonic() - started))
        finally:
            for sock in flood:
                sock.close()
        settled = wait_until(lambda: descriptors(server.proc.pid) <= baseline, timeout=10)
    worst = max(seconds for _, seconds in health) if health else float("nan")
    print(
        f"non-reading flood: {len(flood)} clients, descriptors {baseline} idle, "
        f"{max(samples)} at most (bound {baseline} + {bound}); /healthz {len(health)} times, "
        f"slowest {worst:.3f} s"
    )
    assert len(flood) == 1100
    assert max(samples) <= baseline + bound
    assert [status for status, _ in health] == [200] * 11
    assert settled


def test_running_out_of_descriptors_pauses_accepting_logs_once_and_recovers(
    tmp_path: Path,
) -> None:
    """EMFILE for 2 s while 100 clients wait: one log line (not one per loop round), the
    listening socket left alone meanwhile, every waiting client answered once it ends."""
    with served(tmp_path, metrics_bytes=100, nofile=256, fill=True) as server:
        server.expect("full")
        cpu_before = cpu_seconds(server.proc.pid)
        waiting = []
        try:
            for _ in range(100):
                sock = socket.create_connection(server.address, timeout=10)
                sock.sendall(HEALTHZ_REQUEST)
                waiting.append(sock)
            time.sleep(2)  # the episode: as long as it lasts, nothing can be accepted
            cpu = cpu_seconds(server.proc.pid) - cpu_before
            server.command("release")
            server.expect("released")
            answers = [answer_status(sock) for sock in waiting]
        finally:
            for sock in waiting:
                sock.close()
        after = answer_status(socket.create_connection(server.address, timeout=10), HEALTHZ_REQUEST)
    failures = server.log.read_text().count("Accepting an HTTP connection failed")
    print(f"EMFILE for 2 s: {failures} log lines, {cpu:.2f} CPU-s in the episode")
    assert failures == 1
    assert answers == [200] * 100
    assert after == 200


def answer_status(sock: socket.socket, request: bytes = b"") -> int:
    """The status ``sock`` is answered with (after sending ``request``); 0 if none comes."""
    with sock:
        try:
            if request:
                sock.sendall(request)
            return status_of(sock.recv(100))
        except OSError:
            return 0


class CountingHmac:
    """``hmac.new`` that counts the bytes it is given to hash."""

    hashed = 0
    real = staticmethod(hmac.new)

    def __init__(self, key: bytes, msg: bytes | None = None, digestmod: object = None) -> None:
        self._mac = self.real(key, msg, digestmod)  # type: ignore[arg-type]
        CountingHmac.hashed += len(msg or b"")

    def update(self, data: bytes) -> None:
        CountingHmac.hashed += len(data)
        self._mac.update(data)

    def hexdigest(self) -> str:
        return self._mac.hexdigest()


@pytest.mark.parametrize(
    ("header", "hashed"),
    [
        ("", 0),  # no signature: read and dropped, never hashed
        (f"{SIGNATURE_HEADER}: sha256=00\r\n", 0),  # not shaped like one: the same
        (f"{SIGNATURE_HEADER}: sha256={'0' * 64}\r\n", 1 << 20),  # hashed once, as it came
    ],
)
def test_a_streamed_one_mib_hook_body_is_read_in_one_pass_and_never_held(
    api: HttpApi, calls: Calls, monkeypatch: pytest.MonkeyPatch, header: str, hashed: int
) -> None:
    """The body comes in 4 KiB pieces; before, each piece copied the whole buffer so far
    (and the whole body was hashed whatever its header said)."""
    monkeypatch.setattr(hmac, "new", CountingHmac)
    CountingHmac.hashed = 0
    head = f"POST /hook HTTP/1.1\r\nContent-Length: {1 << 20}\r\n{header}\r\n".encode()
    piece = b"x" * 4096
    tracemalloc.start()
    try:
        with socket.create_connection(api.address, timeout=5) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(head)
            for _ in range((1 << 20) // len(piece)):
                sock.sendall(piece)
            answer = sock.recv(100)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    print(f"1 MiB hook body in 4 KiB pieces: {peak / 1024:.0f} KiB at most, {hashed} hashed")
    assert status_of(answer) == 401
    assert CountingHmac.hashed == hashed
    assert peak < 512 * 1024
    assert calls.count == 0
