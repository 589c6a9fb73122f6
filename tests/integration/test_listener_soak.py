"""Issue 40's soak: ``proxyfleet run`` with a 1,000-proxy fleet under ``LimitNOFILE=1024``
(``prlimit``), flooded for 30 s by clients that send ``GET /metrics`` and never read.

Before, four such clients took the daemon to 1,023 descriptors: a commit pushed meanwhile
stalled (SourceUnavailable), the status write failed, the log filled with accept failures
and /healthz went unanswered for minutes. Here the descriptors are sampled from
/proc/<pid>/fd throughout and must stay within the idle peak plus the listener's bound,
/healthz is asked twice a second (latencies printed; it must answer), and a commit pushed
in the middle of the flood must be applied within one interval.
"""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import deque
from pathlib import Path

from daemonutil import wait_until
from floodutil import METRICS_REQUEST, descriptors, never_reading, tcp_descriptors
from gitutil import git
from hostservices import free_port
from lockprocs import fleet_files, fleet_remote

from reconciler.adapters.surface.httpapi import ListenerLimits

FLOOD_SECONDS = 30.0
INTERVAL = 30.0
CLIENTS = 4
NOFILE = 1024
PRLIMIT = ["prlimit", f"--nofile={NOFILE}", "--"]
"""systemd's ``LimitNOFILE=1024`` (the shipped unit's), on the daemon alone."""
KEPT = 300
"""Connections each flooding client keeps open (it closes its oldest past that)."""


def healthz(port: int) -> tuple[bool, float]:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            ok = r.status == 200
    except OSError:
        ok = False
    return ok, time.monotonic() - started


def flood(port: int, stop: threading.Event, opened: list[int]) -> None:
    """One hostile client: complete requests on new connections, as fast as it can, never
    reading an answer."""
    kept: deque[socket.socket] = deque()
    try:
        while not stop.is_set():
            try:
                kept.append(never_reading(("127.0.0.1", port), METRICS_REQUEST))
                opened[0] += 1
            except OSError:
                time.sleep(0.01)
            while len(kept) > KEPT:
                kept.popleft().close()
    finally:
        for sock in kept:
            sock.close()


def applied(remote_bare: Path, revision: str) -> bool:
    try:
        message = git(remote_bare, "log", "-1", "--format=%B", "proxyfleet-status")
    except AssertionError:
        return False
    return f"applied revision {revision[:12]}" in message


def test_a_1000_proxy_daemon_under_limit_nofile_1024_outlives_a_flood_of_clients_that_never_read(
    tmp_path: Path,
) -> None:
    remote = fleet_remote(tmp_path, 1000)
    port = free_port()
    config = tmp_path / "proxyfleet.yaml"
    config.write_text(
        f"""\
repo:
  url: {remote.url}
interval: {INTERVAL:.0f}
listen: "127.0.0.1:{port}"
ssh:
  keyFile: {tmp_path}/no-such-key
  knownHostsFile: {tmp_path}/known_hosts
  connectTimeoutSeconds: 2
stateDir: {tmp_path}/state
"""
    )
    stderr = tmp_path / "daemon.log"
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [*PRLIMIT, sys.executable, "-m", "reconciler", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
        )
    samples: list[tuple[int, int]] = []
    """(all descriptors, the listener's TCP sockets) every 50 ms."""
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            try:
                samples.append((descriptors(proc.pid), tcp_descriptors(proc.pid, port)))
            except OSError:
                return
            time.sleep(0.05)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stop = threading.Event()
    counts = [[0] for _ in range(CLIENTS)]
    try:
        first = git(remote.bare, "rev-parse", "main")
        assert wait_until(lambda: applied(remote.bare, first), timeout=120), stderr.read_text()
        idle = max(total for total, _ in samples)
        flooders = [
            threading.Thread(target=flood, args=(port, stop, counts[n]), daemon=True)
            for n in range(CLIENTS)
        ]
        for thread in flooders:
            thread.start()
        flood_started = time.monotonic()
        checks: list[tuple[bool, float]] = []
        revision = ""
        pushed_at = applied_at = 0.0
        while time.monotonic() - flood_started < FLOOD_SECONDS:
            checks.append(healthz(port))
            if not revision and time.monotonic() - flood_started > FLOOD_SECONDS / 3:
                files = fleet_files(1000)
                files["proxies.yaml"] = files["proxies.yaml"].replace("web-1000", "web-1001")
                revision = remote.commit(files, "Rename web-1000 during the flood")
                pushed_at = time.monotonic()
            if revision and not applied_at and applied(remote.bare, revision):
                applied_at = time.monotonic()
            time.sleep(0.5)
        stop.set()
        for thread in flooders:
            thread.join(10)
        if not applied_at:
            # The run the push triggers starts during the flood; a 1000-proxy cycle takes
            # 30-50 s on 2 cores at load 18 (load, plan, the status commit), so it may end
            # after the flood does. The figure below says how long it took.
            assert wait_until(lambda: applied(remote.bare, revision), timeout=3 * INTERVAL)
            applied_at = time.monotonic()
        peak = max(total for total, _ in samples)
        listener_peak = max(listener for _, listener in samples)
    finally:
        stop.set()
        sampling.set()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    log = stderr.read_text()
    bound = ListenerLimits().max_connections
    latencies = sorted(seconds for _, seconds in checks)
    print(
        f"soak: {sum(c[0] for c in counts)} non-reading connections in {FLOOD_SECONDS:.0f} s "
        f"from {CLIENTS} clients; descriptors {idle} at most idle, {peak} at most flooded, "
        f"{listener_peak} of them the listener's TCP sockets (bound 1 + {bound}); "
        f"/healthz {len(checks)} times, "
        f"{sum(ok for ok, _ in checks)} answered, median {latencies[len(latencies) // 2]:.3f} s, "
        f"slowest {latencies[-1]:.3f} s, {sum(s > 1 for s in latencies)} over 1 s; commit "
        f"applied {applied_at - pushed_at:.1f} s after its push (interval {INTERVAL:.0f} s); "
        f"{log.count('Accepting an HTTP connection failed')} accept failures logged"
    )
    assert listener_peak <= 1 + bound
    assert peak <= NOFILE // 4  # the rest of the daemon keeps what it needs, far from the limit
    # A connection attempt that meets the kernel's full accept queue is dropped and retried
    # by the client's kernel after 1, 3, 7 s (docs/security.md, "Not guaranteed"); on a
    # loaded machine one probe in many can miss its deadline that way. The daemon must never
    # stop answering: no two probes in a row go unanswered, and nine in ten are answered.
    answered = [ok for ok, _ in checks]
    assert sum(answered) >= 0.9 * len(answered), answered
    assert not any(not a and not b for a, b in itertools.pairwise(answered)), answered
    assert applied_at - pushed_at <= INTERVAL
    assert "SourceUnavailable" not in log
