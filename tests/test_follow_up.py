"""A new VM that is still booting is looked at again in FOLLOW_UP seconds, not an interval later.

The engine names such VMs in ``RunReport.settling`` (over the host adapter's
fake and the fake clock); the daemon shortens its next wait while any are named.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from pathlib import Path

import pytest
from daemonutil import real_daemon, running, wait_until
from reports import report
from test_reconcile_fakehost import World

from reconciler.adapters.state.historystore import FileHistoryStore
from reconciler.engine.daemon import FOLLOW_UP, HANDOVER, Daemon
from reconciler.model.report import Health, RunReport
from reconciler.model.settings import ApplySettings, DaemonSettings, ListenSettings


@pytest.fixture
def booting(tmp_path: Path) -> World:
    """One proxy, created by the first cycle, whose VM has no address yet (still booting)."""
    w = World(tmp_path)
    w.engine.settings = ApplySettings(
        observe_timeout=2.0, replace_timeout=600.0, ip_wait_timeout=60.0
    )
    for fake in w.hosts.values():
        fake.on_call = None  # no address on create
    w.write("web-1")
    return w


def domain_of(world: World) -> tuple[str, str]:
    ((host, domain),) = [(n, d) for n, h in world.hosts.items() for d in h.domains]
    return host, domain


def test_a_created_vm_without_an_address_yet_is_settling(booting: World) -> None:
    first = booting.cycle()

    (web1,) = first.proxies
    assert (web1.state, web1.health) == ("running", Health.UNKNOWN)
    assert first.settling == ("web-1",)


def test_after_a_restart_a_vm_the_last_process_created_is_settling_until_it_is_healthy(
    booting: World,
) -> None:
    booting.cycle()
    host, domain = domain_of(booting)
    booting.engine.close()  # the daemon is gone; a new run sees the VM as it is
    booting.time.sleep(120)

    restarted = booting.cycle()

    assert restarted.outcomes == ()
    assert restarted.settling == ("web-1",)
    booting.hosts[host].addresses_of[domain] = ("198.51.100.7",)
    healthy = booting.cycle()
    assert [p.health for p in healthy.proxies] == [Health.HEALTHY]
    assert healthy.settling == ()


def test_a_vm_unhealthy_for_longer_than_the_replace_timeout_is_no_longer_settling(
    booting: World,
) -> None:
    booting.cycle()
    booting.time.sleep(600)

    later = booting.cycle()

    assert [p.health for p in later.proxies] == [Health.UNKNOWN]
    assert later.settling == ()


def test_a_young_vm_that_passed_once_and_whose_address_is_lost_is_not_settling(
    booting: World,
) -> None:
    booting.cycle()
    host, domain = domain_of(booting)
    booting.hosts[host].addresses_of[domain] = ("198.51.100.7",)
    assert booting.cycle().settling == ()  # passed: healthy once
    booting.hosts[host].addresses_of[domain] = ()  # its agent stops answering for a while

    later = booting.cycle()

    assert [p.health for p in later.proxies] == [Health.UNKNOWN]
    assert later.settling == ()


def test_a_healthy_new_vm_is_not_settling(tmp_path: Path) -> None:
    w = World(tmp_path)
    w.write("web-1")

    first = w.cycle()

    assert [p.health for p in first.proxies] == [Health.HEALTHY]
    assert first.settling == ()


def test_a_new_vm_that_passes_beside_its_old_vm_brings_the_handover_run_soon(
    tmp_path: Path,
) -> None:
    """The run whose check finds a replace's new VM healthy for the first time leaves its
    old VM for the next plan (the handover, and the zone's next batch): that run comes in
    FOLLOW_UP seconds, not an interval later, or every batch of a rollout would wait for
    the interval."""
    w = World(tmp_path / "repo")
    w.root.mkdir()
    w.engine.history = FileHistoryStore(tmp_path / "state" / "history.json")
    w.write("web-1")
    w.cycle()
    w.write("web-1", hostname_suffix="v2-")

    made = w.cycle()  # the replace's new VM answers at once here

    assert [o.action.kind.value for o in made.outcomes] == ["replace"]
    assert [p.health for p in made.proxies] == [Health.HEALTHY]
    assert made.settling == ("web-1",)
    assert made.handover == ("web-1",)
    handed = w.cycle()
    assert [o.action.kind.value for o in handed.outcomes] == ["delete"]
    assert handed.settling == ()
    assert handed.handover == ()


@pytest.fixture
def settings(tmp_path: Path) -> DaemonSettings:
    return DaemonSettings(
        interval=3600, jitter=0.0, listen=ListenSettings("127.0.0.1", 0), state_dir=tmp_path
    )


def daemon(settings: DaemonSettings, cycle: object, **kw: object) -> Daemon:
    return real_daemon(settings, cycle, **kw)  # type: ignore[arg-type]


def settling_report(minute: int = 0) -> RunReport:
    return dataclasses.replace(report(minute=minute, health=Health.UNKNOWN), settling=("web-1",))


def test_the_next_run_comes_after_follow_up_seconds_while_a_new_vm_settles(
    settings: DaemonSettings,
) -> None:
    made = daemon(settings, lambda _stop: report())

    assert made.wait_after(settling_report()) == (FOLLOW_UP, "follow-up")
    assert made.wait_after(report()) == (3600.0, "interval")
    assert FOLLOW_UP == 30.0


def test_a_run_that_found_a_first_pass_beside_an_old_vm_brings_the_handover_at_once(
    settings: DaemonSettings,
) -> None:
    made = daemon(settings, lambda _stop: report())
    found = dataclasses.replace(settling_report(), handover=("web-1",))

    assert made.wait_after(found) == (HANDOVER, "handover")
    assert HANDOVER < FOLLOW_UP
    assert made.wait_after(dataclasses.replace(found, handover=())) == (FOLLOW_UP, "follow-up")


def test_an_interval_shorter_than_the_follow_up_wins(settings: DaemonSettings) -> None:
    made = daemon(dataclasses.replace(settings, interval=10.0), lambda _stop: report())

    assert made.wait_after(settling_report()) == (10.0, "interval")


def test_the_daemon_runs_again_soon_while_vms_settle_and_then_waits_the_interval(
    settings: DaemonSettings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="reconciler.engine.daemon")
    calls: list[float] = []
    lock = threading.Lock()

    def cycle(_stop: threading.Event) -> RunReport:
        with lock:
            calls.append(time.monotonic())
            n = len(calls)
        return settling_report(n) if n <= 2 else report(minute=n)

    with running(daemon(settings, cycle, follow_up=0.3)) as made:
        assert wait_until(lambda: len(calls) >= 3, timeout=5)
        time.sleep(1.0)
        assert len(calls) == 3
        assert made.next_wait == (3600.0, "interval")
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert all(gap >= 0.29 for gap in gaps), gaps
    assert "Reconcile started (follow-up)." in caplog.text
    assert "1 new VM(s) not healthy yet (web-1); next run in 0 s." in caplog.text
