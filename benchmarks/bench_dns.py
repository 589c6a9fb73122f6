"""Row dns: one run's DNS update of a 200-proxy fleet, against a real BIND 9 (issue 41).

A ``named`` of its own (the tests' tests/bindserver.py: one dynamic zone on 127.0.0.1, a
TSIG key made by ``tsig-keygen``), and the daemon's publisher (``Rfc2136Publisher``) for a
fleet of 200 proxies: 4 zones, 10 ProxySets of 20. Measured, per run:

- **first**: the zone empty, every name created (200 proxy names, 4 zone names, 10 set
  names, each with its TXT registry record);
- **rollout**: every proxy on a new address (an image update, all at once): 214 names
  changed, each with its prerequisites;
- **idle**: nothing changed: the AXFR alone, no UPDATE sent.

Each run is timed (read + decide + write), and the UPDATE messages it sent are counted
and sized (wire bytes, TSIG included) by wrapping dnspython's ``dns.query.tcp``: the
publisher must send one per run at most. Asserts nothing; prints the figures.

Run: ``.venv/bin/python -m benchmarks.bench_dns [--runs N] [--port P]``. Needs ``named``
and ``tsig-keygen`` (Debian ``bind9``, ``bind9-utils``); no lab.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dns.message
import dns.query

from benchmarks.common import ROOT, Result, emit
from reconciler.adapters.dns.rfc2136 import Rfc2136Publisher
from reconciler.model.report import DnsResult, Health, Member

sys.path.insert(0, str(ROOT / "tests"))  # the one BIND the tests and this row start
from bindserver import Bind  # type: ignore[import-not-found]  # tests/, on sys.path above

PROXIES = 200
ZONES = 4
SET_SIZE = 20
FLEET = "bench"


def fleet(generation: int) -> list[Member]:
    """200 healthy proxies; ``generation`` picks their addresses (a rollout moves them all)."""
    return [
        Member(
            f"web{i // SET_SIZE}-{i % SET_SIZE}",
            zone=f"zone-{i % ZONES}",
            proxy_set=f"web{i // SET_SIZE}",
            address=f"10.{generation}.{i // 250}.{i % 250 + 1}",
            health=Health.HEALTHY,
        )
        for i in range(PROXIES)
    ]


class Updates:
    """Counts and sizes the UPDATE messages sent through ``dns.query.tcp``."""

    def __init__(self) -> None:
        self.sizes: list[float] = []
        self._tcp: Callable[..., Any] = dns.query.tcp

    def __enter__(self) -> Updates:
        def tcp(query: dns.message.Message, *args: Any, **kwargs: Any) -> Any:
            response = self._tcp(query, *args, **kwargs)
            self.sizes.append(len(query.to_wire()))
            return response

        dns.query.tcp = tcp  # type: ignore[assignment]  # the same call, counted
        return self

    def __exit__(self, *_exc: object) -> None:
        dns.query.tcp = self._tcp


def one_run(publisher: Rfc2136Publisher, members: list[Member]) -> tuple[float, list[float], int]:
    """Seconds, UPDATE sizes and changes of one publish."""
    with Updates() as updates:
        started = time.perf_counter()
        outcome = publisher.publish(FLEET, members)
        seconds = time.perf_counter() - started
    assert outcome.result is not DnsResult.FAILED, outcome.error
    return seconds, updates.sizes, outcome.changes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--port", type=int, default=int(os.environ.get("BENCH_DNS_PORT", 19353)))
    parser.add_argument("--json")
    args = parser.parse_args()
    result = Result(row="dns", load_before=os.getloadavg())
    samples: dict[str, list[float]] = {"first": [], "rollout": [], "idle": []}
    sizes: dict[str, list[float]] = {"first": [], "rollout": []}
    changes: dict[str, int] = {}
    updates: list[float] = []  # UPDATE messages per run, the most of any phase
    for run in range(args.runs + 1):  # run 0 warms up
        with tempfile.TemporaryDirectory(prefix="bench-dns-") as scratch:
            bind = Bind(Path(scratch), args.port)
            bind.start()
            try:
                publisher = Rfc2136Publisher(bind.settings())
                for phase, members in (
                    ("first", fleet(1)),
                    ("rollout", fleet(2)),
                    ("idle", fleet(2)),
                ):
                    seconds, sent, changed = one_run(publisher, members)
                    if run:
                        updates.append(len(sent))
                        samples[phase].append(seconds)
                        sizes.get(phase, []).extend(sent)
                        changes[phase] = changed
            finally:
                bind.stop()
    for phase, values in samples.items():
        result.add(f"{phase} run", "s", values)
    for phase, values in sizes.items():
        result.add(f"{phase} UPDATE", "bytes", values)
    result.add("updates", "messages", updates)
    result.add("proxies", "proxies", [PROXIES])
    result.note(
        f"{PROXIES} proxies ({ZONES} zones, {PROXIES // SET_SIZE} sets): "
        + ", ".join(
            f"{phase} {statistics.median(samples[phase]) * 1000:.0f} ms"
            + (
                f", {changes[phase]} changes in 1 UPDATE of {sizes[phase][0]} bytes"
                if phase in sizes
                else ", no UPDATE"
            )
            for phase in samples
        )
    )
    emit(result, args.json)


if __name__ == "__main__":
    main()
