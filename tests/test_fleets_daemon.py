"""Two daemons of two fleets each, in threads, on the fake lock service and a fake ring:
each fleet is reconciled by the daemon the ring names, /healthz and /metrics say so per
fleet, and a fleet the ring moves changes hands."""

from __future__ import annotations

import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from daemonutil import real_daemon, wait_until
from enginefakes import FLEET, HOST, PROXY
from reports import report

from reconciler.adapters.coordination.fakelock import FakeLockBackend, FakeLocks
from reconciler.adapters.coordination.fakering import FakeRing
from reconciler.adapters.git.fakesource import FakeSource
from reconciler.adapters.surface.httpapi import HttpApi
from reconciler.adapters.surface.metrics import FleetMetrics, Metrics
from reconciler.adapters.surface.notify import SdNotify
from reconciler.engine.daemon import source_cycle
from reconciler.engine.fleets import FleetsDaemon
from reconciler.engine.leadership import Leadership
from reconciler.model.coordination import Holder
from reconciler.model.report import RunReport
from reconciler.model.settings import DaemonSettings, ListenSettings

FLEETS = ("home", "lab")


@dataclass
class Box:
    fleets: FleetsDaemon
    ring: FakeRing
    reconciles: dict[str, list[str]]


def fleet_repo(root: Path, fleet: str) -> Path:
    root.mkdir()
    text = FLEET.replace("HOSTS\n", HOST.replace("NAME", "kvm01"))
    (root / "fleet.yaml").write_text(text.replace("name: home", f"name: {fleet}"))
    (root / "proxies.yaml").write_text(PROXY.replace("NAME", "web-1"))
    return root


def box(name: str, backend: FakeLockBackend, owners: dict[str, str], tmp: Path) -> Box:
    stop = threading.Event()
    ring = FakeRing(name, owners)
    locks = FakeLocks(backend, Holder(name, 100, "daemon"))
    settings = DaemonSettings(interval=3600, listen=ListenSettings("127.0.0.1", 0))
    daemons, metrics = {}, {}
    reconciles: dict[str, list[str]] = {f: [] for f in FLEETS}
    for fleet in FLEETS:
        m = metrics[fleet] = Metrics()
        leadership = Leadership(
            locks, poll=0.05, on_change=m.leading, fleet=fleet, ring=ring, drain=5
        )
        m.leading(fleet, False)

        def reconcile(root: Path, revision: str, fleet: str = fleet) -> RunReport:
            reconciles[fleet].append(revision)
            return report(revision=revision)

        daemons[fleet] = real_daemon(
            settings,
            source_cycle(
                FakeSource(fleet_repo(tmp / f"{name}-{fleet}", fleet)),
                reconcile,
                leadership=leadership,
                fleet=fleet,
            ),
            metrics=m,
            stop=stop,
            handle_signals=False,
            leadership=leadership,
            serve_http=False,
        )
    fleets = FleetsDaemon(
        settings,
        daemons,
        ring=ring,
        metrics=FleetMetrics(metrics),
        surface=lambda endpoints: HttpApi(settings.listen, endpoints),
        stop=stop,
        poll=0.05,
        notifier=SdNotify({}),
        handle_signals=False,
    )
    return Box(fleets, ring, reconciles)


@contextmanager
def running(b: Box) -> Iterator[Box]:
    thread = threading.Thread(target=b.fleets.run)
    thread.start()
    try:
        yield b
    finally:
        b.fleets.stop.set()
        thread.join(20)


def get(b: Box, path: str) -> str:
    host, port = b.fleets.http.address
    try:
        with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=5) as r:
            return str(r.read().decode())
    except urllib.error.HTTPError as err:
        return str(err.read().decode())


@contextmanager
def home_on_a_and_lab_on_b(tmp: Path) -> Iterator[tuple[FakeLockBackend, Box, Box]]:
    backend = FakeLockBackend()
    owners = {"home": "box-a", "lab": "box-b"}
    a, b = box("box-a", backend, owners, tmp), box("box-b", backend, owners, tmp)
    with running(a), running(b):
        assert wait_until(lambda: a.reconciles["home"] and b.reconciles["lab"], timeout=10)
        yield backend, a, b


def test_each_fleet_is_led_by_the_daemon_the_ring_names_and_both_say_so_per_fleet(
    tmp_path: Path,
) -> None:
    with home_on_a_and_lab_on_b(tmp_path) as (_, a, b):
        # (who holds it is looked up every 10 s while standing by: "unknown" until then)

        health = get(a, "/healthz").splitlines()
        assert health[0] == "ok: leading 1 of 2 fleets (home) as ring member box-a"
        assert health[1].startswith("home: ok: leader of fleet home;")
        assert health[2].startswith(
            "lab: standby: standby for fleet lab, assigned to box-b (ring of 2), led by "
        )
        metrics = get(a, "/metrics")
        assert 'proxyfleet_leader{fleet="home"} 1.0' in metrics
        assert 'proxyfleet_leader{fleet="lab"} 0.0' in metrics
        assert a.reconciles["lab"] == [] and b.reconciles["home"] == []


def test_a_fleet_the_ring_moves_is_handed_over_and_reconciled_by_its_new_owner(
    tmp_path: Path,
) -> None:
    with home_on_a_and_lab_on_b(tmp_path) as (backend, a, b):
        for r in (a.ring, b.ring):
            r.owners["lab"] = "box-a"

        assert wait_until(lambda: len(a.reconciles["lab"]) == 1, timeout=10)
        assert get(a, "/healthz").startswith("ok: leading 2 of 2 fleets (home, lab)")
        assert 'proxyfleet_leader{fleet="lab"} 0.0' in get(b, "/metrics")
        events = [(event, fleet) for event, fleet, _ in backend.log if fleet == "lab"]
        assert events == [("acquired", "lab"), ("released", "lab"), ("acquired", "lab")]


def test_a_trigger_of_the_process_reaches_every_fleet_it_leads(tmp_path: Path) -> None:
    backend = FakeLockBackend()
    a = box("box-a", backend, dict.fromkeys(FLEETS, "box-a"), tmp_path)
    with running(a):
        assert wait_until(lambda: all(a.reconciles[f] for f in FLEETS), timeout=10)
        a.fleets.triggers.fire("SIGHUP")
        assert wait_until(lambda: all(len(a.reconciles[f]) == 2 for f in FLEETS), timeout=10)
