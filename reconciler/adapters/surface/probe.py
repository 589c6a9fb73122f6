"""The health check: one request *through* the proxy VM, as the manifest says.

``GET <probeURL>`` is sent to ``ip:proxyPort`` the way a client of the proxy
sends it: an absolute URI in the request line for ``http://`` targets, a
``CONNECT`` tunnel for ``https://`` ones. The proxy is healthy when the answer
is ``expectStatus`` within ``timeoutSeconds``. Network failures are results,
never exceptions: the check step must go on with the next VM.

``timeoutSeconds`` is one deadline for the whole probe, not a timeout per
socket step: a proxy that sends its answer a byte at a time would otherwise
hold the check for as long as it likes. At the deadline a timer shuts the
socket down, which ends whatever read is blocked. A timeout that is not a
finite number in (0, ``MAX_TIMEOUT``] is taken as ``MAX_TIMEOUT``.
"""

from __future__ import annotations

import contextlib
import http.client
import logging
import math
import socket
import ssl
import threading
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from reconciler.model.fleet import HealthCheck

log = logging.getLogger(__name__)

_BODY_LIMIT = 64 * 1024
MAX_TIMEOUT = 60.0
"""Seconds: the longest a probe may take (the schema's maximum for timeoutSeconds)."""
_HEADERS = {
    "User-Agent": "proxyfleet-probe",
    "Cache-Control": "no-cache",
    "Connection": "close",
}


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """``status`` is the HTTP status the proxy relayed (None if none came);
    ``error`` says why ``ok`` is False; ``duration`` is seconds."""

    ok: bool
    status: int | None = None
    error: str | None = None
    duration: float = 0.0

    @property
    def healthy(self) -> bool:
        return self.ok

    @property
    def detail(self) -> str:
        """One sentence for status and logs; the same for the same outcome, however long it
        took, because the status branch gets a commit whenever a proxy's detail changes."""
        if self.ok:
            return f"HTTP {self.status} through the proxy"
        return self.error or "probe failed"


class HttpProber:
    """The real prober (``reconciler.engine.check.Prober``)."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock

    def probe(self, ip: str, health: HealthCheck) -> ProbeResult:
        result = probe(ip, health, clock=self._clock)
        log.debug(
            "Probe through %s:%d: %s in %.0f ms",
            ip,
            health.proxy_port,
            result.detail,
            result.duration * 1000,
        )
        return result


class FakeProber:
    """The prober's fake for unit tests: every address answers healthy unless scripted
    otherwise, and every call is recorded.

    ``results`` gives an address its own answer; an address in ``unhealthy`` answers
    HTTP 503; with ``healthy_only`` set, every address not in it does. ``calls`` lists the
    probed addresses in order, ``checks`` the health checks they were probed with.
    """

    def __init__(self, results: Mapping[str, ProbeResult] | None = None) -> None:
        self.results: dict[str, ProbeResult] = dict(results or {})
        self.unhealthy: set[str] = set()
        self.healthy_only: set[str] | None = None
        self.calls: list[str] = []
        self.checks: list[HealthCheck] = []
        self._lock = threading.Lock()

    def probe(self, ip: str, health: HealthCheck) -> ProbeResult:
        with self._lock:
            self.calls.append(ip)
            self.checks.append(health)
            scripted = self.results.get(ip)
            refused = ip in self.unhealthy or (
                self.healthy_only is not None and ip not in self.healthy_only
            )
        if scripted is not None:
            return scripted
        if refused:
            return ProbeResult(ok=False, status=503, error=f"HTTP 503 from {health.probe_url}")
        return ProbeResult(ok=True, status=health.expect_status)


def probe(
    ip: str, health: HealthCheck, *, clock: Callable[[], float] = time.monotonic
) -> ProbeResult:
    """``GET health.probe_url`` through the proxy at ``ip:health.proxy_port``; never raises."""
    started = clock()
    try:
        return _probe(ip, health, started=started, clock=clock)
    except Exception as exc:  # the prober's contract: a result, whatever happened
        log.warning("Probe through %s failed unexpectedly: %s", ip, exc, exc_info=True)
        return ProbeResult(ok=False, error=_reason(exc), duration=clock() - started)


def deadline_seconds(timeout: float) -> float:
    """``timeout`` when it is a finite number in (0, MAX_TIMEOUT], else MAX_TIMEOUT."""
    if not math.isfinite(timeout) or timeout <= 0 or timeout > MAX_TIMEOUT:
        return MAX_TIMEOUT
    return timeout


def _probe(
    ip: str, health: HealthCheck, *, started: float, clock: Callable[[], float]
) -> ProbeResult:
    target = urllib.parse.urlsplit(health.probe_url)
    scheme = target.scheme.lower()
    if scheme not in ("http", "https") or not target.hostname:
        return ProbeResult(ok=False, error=f"probe URL {health.probe_url!r} is not http(s)")
    timeout = deadline_seconds(health.timeout_seconds)
    connection: http.client.HTTPConnection
    try:
        if scheme == "https":
            connection = http.client.HTTPSConnection(
                ip, health.proxy_port, timeout=timeout, context=ssl.create_default_context()
            )
            connection.set_tunnel(target.hostname, target.port or 443)
            request_target = urllib.parse.urlunsplit(("", "", target.path or "/", target.query, ""))
        else:
            connection = http.client.HTTPConnection(ip, health.proxy_port, timeout=timeout)
            request_target = health.probe_url  # absolute URI: this is a proxy request
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return ProbeResult(ok=False, error=_reason(exc), duration=clock() - started)
    expired = threading.Event()
    timer = threading.Timer(timeout, _abort, args=(connection, expired))
    timer.daemon = True
    timer.start()
    try:
        connection.request("GET", request_target, headers=_HEADERS)
        response = connection.getresponse()
        response.read(_BODY_LIMIT)
        status = response.status
    except (OSError, http.client.HTTPException, ValueError) as exc:
        error = "timed out" if expired.is_set() else _reason(exc)
        return ProbeResult(ok=False, error=error, duration=clock() - started)
    finally:
        timer.cancel()
        connection.close()
    duration = clock() - started
    if status != health.expect_status:
        return ProbeResult(
            ok=False,
            status=status,
            error=f"expected HTTP {health.expect_status}, got {status}",
            duration=duration,
        )
    if expired.is_set() or duration > timeout:
        # The answer came, but the whole of it must fit in the deadline too.
        return ProbeResult(
            ok=False,
            status=status,
            error=f"answered after {duration:.1f} s, over the {timeout:g} s limit",
            duration=duration,
        )
    return ProbeResult(ok=True, status=status, duration=duration)


def _abort(connection: http.client.HTTPConnection, expired: threading.Event) -> None:
    """The deadline passed: end any blocked read or write on the probe's socket."""
    expired.set()
    sock = connection.sock
    if sock is None:
        return
    with contextlib.suppress(OSError):  # already closed: nothing left to stop
        sock.shutdown(socket.SHUT_RDWR)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
