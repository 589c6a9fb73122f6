"""A real Prometheus (Debian ``prometheus``) discovers the proxies from a running daemon's
``GET /sd/proxies`` (``http_sd_configs``): its /api/v1/targets lists every proxy with the
labels, and drops a deleted one.

The daemon listens on 127.0.0.1:19880, Prometheus on 127.0.0.1:19890; the proxies'
addresses are loopback ports nothing listens on (their scrapes fail at once; only the
discovery is under test). A minimal starter of its own: tests/ will share one later.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import sdmembers
from daemonutil import real_daemon, running, wait_until
from reports import report

from reconciler.model.report import Member, RunReport
from reconciler.model.settings import DaemonSettings, ListenSettings

DAEMON_PORT = 19880
PROMETHEUS_PORT = 19890
# Loopback ports nothing listens on: scrapes fail at once, discovery is what is tested.
WEB0 = replace(sdmembers.WEB0, address="127.0.0.1", port=19881)
WEB1 = replace(sdmembers.WEB1, address="127.0.0.1", port=19882)

CONFIG = f"""
global:
  scrape_interval: 1s
scrape_configs:
  - job_name: proxyfleet-proxies
    http_sd_configs:
      - url: http://127.0.0.1:{DAEMON_PORT}/sd/proxies
        refresh_interval: 1s
"""


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[str]:
    (tmp_path / "prometheus.yml").write_text(CONFIG)
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            shutil.which("prometheus") or "/usr/bin/prometheus",
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{PROMETHEUS_PORT}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{PROMETHEUS_PORT}"
    try:
        assert wait_until(lambda: _ready(url), timeout=60), (
            tmp_path / "prometheus.log"
        ).read_text()
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _targets(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v1/targets?state=active", timeout=5) as response:
        found: list[dict[str, Any]] = json.load(response)["data"]["activeTargets"]
    return found


def _labels(url: str) -> list[dict[str, str]]:
    keys = ("fleet", "proxy", "zone", "set", "host", "health", "instance")
    return sorted(
        ({k: t["labels"].get(k, "") for k in keys} for t in _targets(url)),
        key=lambda labels: labels["proxy"],
    )


class Fleet:
    """A cycle that reports ``members``, which the test changes between runs."""

    def __init__(self, *members: Member) -> None:
        self.members = members

    def __call__(self, stop: threading.Event) -> RunReport:
        return replace(report(minute=0), fleet="home", members=self.members)


def test_prometheus_discovers_every_proxy_with_its_labels_and_drops_a_deleted_one(
    prometheus: str, tmp_path: Path
) -> None:
    settings = DaemonSettings(
        interval=3600,
        listen=ListenSettings("127.0.0.1", DAEMON_PORT),
        state_dir=tmp_path / "state",
    )
    fleet = Fleet(WEB0, WEB1)
    daemon = real_daemon(settings, fleet)
    expected = [
        {
            "fleet": "home",
            "proxy": "web-0",
            "zone": "a",
            "set": "web",
            "host": "kvm01",
            "health": "healthy",
            "instance": "127.0.0.1:19881",
        },
        {
            "fleet": "home",
            "proxy": "web-1",
            "zone": "b",
            "set": "web",
            "host": "kvm02",
            "health": "unhealthy",
            "instance": "127.0.0.1:19882",
        },
    ]
    with running(daemon):
        found = wait_until(lambda: _labels(prometheus) == expected, timeout=60)
        listed = _labels(prometheus)
        fleet.members = (WEB0,)
        daemon.triggers.fire("commit")
        dropped = wait_until(lambda: _labels(prometheus) == expected[:1], timeout=60)
        after = _labels(prometheus)

    assert found, listed
    assert dropped, after
