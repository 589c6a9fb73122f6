"""GET /sd/proxies: the proxies as Prometheus HTTP service discovery targets."""

from __future__ import annotations

import json
import threading
from dataclasses import replace
from pathlib import Path

from daemonutil import http, real_daemon, running, wait_until
from reports import report
from sdmembers import WEB0, WEB1

from reconciler.core.endpoints.targets import http_sd
from reconciler.engine.endpoints import sd_targets
from reconciler.model.report import Member, RunReport, RunResult
from reconciler.model.settings import DaemonSettings, ListenSettings

BOOTING = Member("solo", zone="a", host="kvm01")


def test_each_proxy_with_an_address_is_a_target_group_with_its_labels() -> None:
    assert http_sd("home", [WEB1, BOOTING, WEB0]) == [
        {
            "targets": ["192.0.2.10:3128"],
            "labels": {
                "fleet": "home",
                "proxy": "web-0",
                "zone": "a",
                "set": "web",
                "host": "kvm01",
                "health": "healthy",
            },
        },
        {
            "targets": ["[2001:db8::11]:8080"],
            "labels": {
                "fleet": "home",
                "proxy": "web-1",
                "zone": "b",
                "set": "web",
                "host": "kvm02",
                "health": "unhealthy",
            },
        },
    ]


class Cycles:
    """Runs the reports it is given, one per cycle, then stalls."""

    def __init__(self, *reports: RunReport) -> None:
        self.reports = list(reports)
        self.calls = 0

    def __call__(self, stop: threading.Event) -> RunReport:
        self.calls += 1
        if self.reports:
            return self.reports.pop(0)
        return replace(report(minute=self.calls), result=RunResult.STALLED, plan=None)


def test_the_daemon_serves_the_last_observed_fleet_and_keeps_it_through_a_stalled_run(
    tmp_path: Path,
) -> None:
    settings = DaemonSettings(
        interval=3600, listen=ListenSettings("127.0.0.1", 0), state_dir=tmp_path / "state"
    )
    observed = replace(report(minute=0), fleet="home", members=(WEB0, BOOTING))
    cycles = Cycles(observed)
    daemon = real_daemon(settings, cycles)
    with running(daemon):
        assert wait_until(lambda: len(daemon.reports) == 1)
        status, body = http(daemon, "/sd/proxies")
        daemon.triggers.fire("commit")
        assert wait_until(lambda: len(daemon.reports) == 2)
        after_stall = http(daemon, "/sd/proxies")[1]
        post = http(daemon, "/sd/proxies", body=b"x")[0]

    assert status == 200
    assert json.loads(body) == http_sd("home", [WEB0])
    assert json.loads(after_stall) == json.loads(body)
    assert post == 405


def test_before_any_observed_run_there_are_no_targets() -> None:
    stalled = replace(report(minute=0), result=RunResult.STALLED, plan=None)

    assert sd_targets([]) == sd_targets([stalled]) == []
