"""Which proxies answer through squid, whichever of their VMs serves: sampled in a thread.

A replace gives a proxy a new VM at a new address, so counting the proxies that
serve cannot ask fixed addresses: it would lose a proxy whose new VM serves and
whose old one is gone. ``Answering`` sends the probe URL through port 3128 of
every address the lab hosts' dnsmasq leased (old VMs' too: they just fail) and
reads which proxy answered from squid's ``Via`` header (its
``visible_hostname``), so a proxy counts while its old *or* its new VM serves.

Used by the rollout benchmark (benchmarks/bench_rollout.py) and the day-2 lab
test's image update (tests/lab/test_e2e_day2.py, scenario a).
"""

from __future__ import annotations

import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

PROBE_TIMEOUT = 5.0
"""Seconds one request through a squid may take; a slower answer counts as none."""
EVERY = 2.0
"""Seconds from the start of one sample to the start of the next."""


def probe(ip: str, url: str, *, timeout: float = PROBE_TIMEOUT) -> tuple[int | None, str]:
    """GET ``url`` through the squid at ``ip``:3128: the status (None: no answer) and Via."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({"http": f"http://{ip}:3128"}))
    try:
        with opener.open(url, timeout=timeout) as resp:
            return int(resp.status), resp.headers.get("Via", "")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Via", "")
    except (OSError, ValueError):
        return None, ""


def leased(leases: Sequence[Path]) -> list[str]:
    """Every address in the dnsmasq lease files ``leases`` (a missing file holds none)."""
    found: set[str] = set()
    for path in leases:
        try:
            lines = path.read_text().splitlines()
        except OSError:
            continue
        found.update(line.split()[2] for line in lines if len(line.split()) >= 3)
    return sorted(found)


class Answering:
    """Samples, every ``every`` s in a thread, which proxies answer ``url`` with 204.

    ``name`` finds the proxy in a Via header (its first group); an answer whose
    Via it does not match, or that takes longer than ``timeout`` s, counts for
    no proxy. Each ``with`` block samples afresh; ``samples`` holds (epoch
    seconds when the sample was in, the names).
    """

    def __init__(
        self,
        leases: Sequence[Path],
        url: str,
        name: re.Pattern[str],
        *,
        every: float = EVERY,
        timeout: float = PROBE_TIMEOUT,
    ) -> None:
        self.leases = tuple(leases)
        self.url = url
        self.name = name
        self.every = every
        self.timeout = timeout
        self.samples: list[tuple[float, frozenset[str]]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(max_workers=64, thread_name_prefix="answering")

    def once(self) -> frozenset[str]:
        """The proxies that answer now, through any leased address."""
        answers = self._pool.map(
            lambda ip: probe(ip, self.url, timeout=self.timeout), leased(self.leases)
        )
        return frozenset(
            found.group(1)
            for status, via in answers
            if status == 204 and (found := self.name.search(via))
        )

    def __enter__(self) -> Answering:
        self.samples = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            seen = self.once()
            self.samples.append((time.time(), seen))
            self._stop.wait(max(0.0, self.every - (time.monotonic() - began)))
