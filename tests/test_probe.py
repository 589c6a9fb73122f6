"""The health probe against a tiny forward-proxy stub on 127.0.0.1."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from proxystub import ProxyStub, serve_proxy

from reconciler.adapters.surface.probe import FakeProber, HttpProber, ProbeResult, probe
from reconciler.model import HealthCheck
from reconciler.ports.prober import Prober


@pytest.fixture
def proxy() -> Iterator[ProxyStub]:
    """Answers like a forward proxy: by the absolute URI in the request line."""
    with serve_proxy() as stub:
        yield stub


def health(port: int, url: str = "http://probe.invalid/generate_204", **kw: float) -> HealthCheck:
    return HealthCheck(
        proxy_port=port, probe_url=url, expect_status=204, timeout_seconds=kw.get("timeout", 2.0)
    )


def test_a_204_through_the_proxy_is_healthy(proxy: ProxyStub) -> None:
    result = probe("127.0.0.1", health(proxy.port))
    assert result.ok and result.status == 204 and result.error is None
    assert result.healthy
    assert "HTTP 204" in result.detail


def test_the_request_is_a_proxy_request_with_an_absolute_uri(proxy: ProxyStub) -> None:
    probe("127.0.0.1", health(proxy.port))
    assert proxy.requests == [("GET", "http://probe.invalid/generate_204", "probe.invalid")]


def test_an_unexpected_status_is_unhealthy_and_says_both(proxy: ProxyStub) -> None:
    result = probe("127.0.0.1", health(proxy.port, "http://probe.invalid/fail"))
    assert not result.ok and result.status == 500
    assert result.error == "expected HTTP 204, got 500"
    assert not result.healthy


def test_a_proxy_that_does_not_answer_in_time_is_unhealthy(proxy: ProxyStub) -> None:
    result = probe("127.0.0.1", health(proxy.port, "http://probe.invalid/slow", timeout=0.3))
    assert not result.ok and result.status is None
    assert result.error == "timed out"
    assert result.duration < 5


def test_a_closed_port_is_unhealthy_not_an_exception() -> None:
    with socket.socket() as placeholder:
        placeholder.bind(("127.0.0.1", 0))
        port = placeholder.getsockname()[1]
    result = probe("127.0.0.1", health(port))
    assert not result.ok and result.error == "connection refused"


def test_an_https_probe_url_is_tunnelled_with_connect(proxy: ProxyStub) -> None:
    result = probe("127.0.0.1", health(proxy.port, "https://probe.invalid/generate_204"))
    assert not result.ok and result.error is not None and "403" in result.error
    assert proxy.requests[0][:2] == ("CONNECT", "probe.invalid:443")


def test_a_probe_url_that_is_not_http_is_unhealthy() -> None:
    result = probe("127.0.0.1", health(1, "ftp://probe.invalid/x"))
    assert not result.ok and "not http" in (result.error or "")


def test_a_slow_but_complete_answer_over_the_limit_is_unhealthy(proxy: ProxyStub) -> None:
    ticks = iter([0.0, 5.0])
    result = probe("127.0.0.1", health(proxy.port, timeout=2.0), clock=lambda: next(ticks))
    assert not result.ok and result.status == 204
    assert "over the 2 s limit" in (result.error or "")


def test_the_real_and_the_fake_prober_satisfy_the_protocol(proxy: ProxyStub) -> None:
    probers: list[Prober] = [
        HttpProber(),
        FakeProber({"127.0.0.1": ProbeResult(ok=True, status=204)}),
    ]
    for prober in probers:
        assert prober.probe("127.0.0.1", health(proxy.port)).ok


def test_the_fake_prober_answers_as_scripted_healthy_otherwise_and_records_calls() -> None:
    fake = FakeProber({"10.0.0.5": ProbeResult(ok=False, error="refused")})
    fake.unhealthy.add("10.0.0.7")
    h = HealthCheck()
    answers = [fake.probe(ip, h) for ip in ("10.0.0.5", "10.0.0.6", "10.0.0.7")]
    assert [(a.ok, a.detail) for a in answers] == [
        (False, "refused"),
        (True, f"HTTP {h.expect_status} through the proxy"),
        (False, f"HTTP 503 from {h.probe_url}"),
    ]
    assert (fake.calls, fake.checks) == (["10.0.0.5", "10.0.0.6", "10.0.0.7"], [h, h, h])
    fake.healthy_only = {"10.0.0.6"}
    assert not fake.probe("10.0.0.8", h).ok


def test_the_detail_of_an_outcome_does_not_change_with_how_long_it_took() -> None:
    # The status branch commits when a proxy's detail changes: a latency in it would make
    # every cycle a commit (seen on the lab: "got 403 (after 21 ms)", then "(after 36 ms)").
    for ok, status, error in ((True, 204, None), (False, 403, "expected HTTP 204, got 403")):
        fast = ProbeResult(ok=ok, status=status, error=error, duration=0.009)
        slow = ProbeResult(ok=ok, status=status, error=error, duration=0.036)
        assert fast.detail == slow.detail
        assert str(status) in fast.detail


@pytest.fixture
def dribbler() -> Iterator[int]:
    """A proxy that answers one byte of its headers every 0.1 s, forever."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    done = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.recv(4096)
                try:
                    for byte in b"HTTP/1.1 204 No Content\r\nX-Pad: " + b"a" * 10_000:
                        if done.wait(0.1):
                            break
                        conn.sendall(bytes([byte]))
                except OSError:
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        done.set()
        thread.join(5)
        server.close()


def test_a_proxy_that_dribbles_its_answer_is_cut_at_the_one_deadline(dribbler: int) -> None:
    result = probe("127.0.0.1", health(dribbler, timeout=0.8))
    assert not result.ok and result.error == "timed out"
    assert 0.7 < result.duration < 2.0


@pytest.mark.parametrize("timeout", [float("inf"), float("nan"), -1.0, 1e7])
def test_a_timeout_that_is_not_a_sane_number_becomes_the_maximum(timeout: float) -> None:
    from reconciler.adapters.surface.probe import MAX_TIMEOUT, deadline_seconds

    assert deadline_seconds(timeout) == MAX_TIMEOUT
    assert deadline_seconds(2.5) == 2.5


def test_the_prober_never_raises_even_on_an_unexpected_error() -> None:
    bad = HealthCheck(proxy_port=70000, probe_url="http://probe.invalid/", timeout_seconds=1.0)
    result = HttpProber().probe("127.0.0.1", bad)
    assert not result.ok and result.error
