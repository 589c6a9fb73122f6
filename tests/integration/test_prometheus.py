"""deploy/'s dashboard and alerts against a real Prometheus (Debian's ``prometheus``) scraping a
running daemon whose engine drives fake hosts, with the alert rules loaded.

Every dashboard panel's query and every alert's expression is evaluated through
Prometheus' HTTP API, as Grafana and the rule manager would: each returns a series,
or, when empty, is shown to be right to be empty: it ran, every metric it names is
one the daemon exports, and every label it selects or groups by is one those series
carry (so it is empty because its condition does not hold, not because of a typo).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from daemonutil import real_daemon, running, wait_until
from enginefakes import FleetRepo
from ruamel.yaml import YAML

from reconciler.adapters.coordination.fleetlock import this_process
from reconciler.adapters.coordination.toozlock import ToozLocks, default_url
from reconciler.adapters.git.fakesource import FakeSource
from reconciler.adapters.hypervisor.fakehost import Call
from reconciler.adapters.surface.metrics import Metrics
from reconciler.cli import compose
from reconciler.engine.daemon import Daemon, source_cycle
from reconciler.engine.leadership import Leadership
from reconciler.errors import PermanentError
from reconciler.model.settings import DaemonSettings, ListenSettings

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "proxyfleet.json"
PORTS = range(19700, 19800)
"""Where this test's Prometheus listens: the first free port of these."""
GRAFANA = {"$instance": ".*", "$fleet": ".*", "$__rate_interval": "1m", "$__range": "10m"}
"""Grafana's variables as its "All" and its interval macros expand them."""
SELECTOR = re.compile(r"\b((?:proxyfleet_[a-z_]+|up))\s*(\{[^}]*\})?")
GROUPING = re.compile(r"\b(?:by|on)\s*\(([^)]*)\)")
ALWAYS = {"le", "instance", "job", "fleet"}
"""Labels every scraped series has (instance, job), a daemon of several fleets adds to every
series (fleet; its absence matches the dashboard's All, ``.*``) or histograms make (le)."""


def free_port() -> int:
    for port in PORTS:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {PORTS}")


@dataclass
class Prometheus:
    url: str
    proc: subprocess.Popen[bytes]

    def get(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as answer:
            return json.loads(answer.read())

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = self.get("/api/v1/query", query=expr)
        assert answer["status"] == "success", (expr, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A leading daemon over an engine with two fake hosts: three proxies, one create fails
    (a partial run), and every host call timed as the libvirt adapter times its calls."""
    (tmp_path / "repo").mkdir()
    world = FleetRepo(tmp_path / "repo")
    metrics = Metrics()
    for name, host in world.hosts.items():

        def timed(call: Call, host_name: str = name) -> None:
            failing = host_name == "kvm02" and call.method == "create"
            metrics.observe_rpc(f"fake.{call.method}", host_name, 0.01, ok=not failing)

        host.on_call = timed
    world.hosts["kvm02"].fail("create", PermanentError("pool is full"))
    state = tmp_path / "state"
    locks = ToozLocks(default_url(state), me=this_process("daemon"), ttl=20)
    leadership = Leadership(locks, poll=0.5, on_change=metrics.leading)
    settings = DaemonSettings(interval=3600, listen=ListenSettings("127.0.0.1", 0), state_dir=state)
    cycle = source_cycle(
        FakeSource(world.root),
        lambda root, revision: world.engine.reconcile_once(root, revision=revision),
        leadership=leadership,
        fleet_of=compose.fleet_of,
    )
    made = real_daemon(settings, cycle, metrics=metrics, leadership=leadership)
    with running(made):
        assert wait_until(lambda: bool(made.reports), timeout=30), "no run finished"
        yield made


@pytest.fixture
def prometheus(daemon: Daemon, tmp_path: Path) -> Iterator[Prometheus]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing; `make deps` installs it (Makefile APT_PACKAGES)"
    host, port = daemon.http.address
    config = tmp_path / "prometheus.yml"
    config.write_text(
        json.dumps(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "rule_files": [str(ALERTS)],
                "scrape_configs": [
                    {"job_name": "proxyfleet", "static_configs": [{"targets": [f"{host}:{port}"]}]}
                ],
            }
        )
    )
    listen = f"127.0.0.1:{free_port()}"
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address={listen}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Prometheus(f"http://{listen}", proc)
    try:

        def scraped_twice() -> bool:
            try:
                found = server.query("count_over_time(proxyfleet_build_info[1m])")
            except OSError:
                return False
            return bool(found) and float(found[0]["value"][1]) >= 3

        assert wait_until(scraped_twice, timeout=60), (tmp_path / "prometheus.log").read_text()
        yield server
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def declared(metrics: Metrics) -> dict[str, set[str]]:
    """Every series name the daemon's registry declares, with its label names: a family
    with labels has no series until something sets one (no blocked action, no failed
    call yet), and its emptiness on Prometheus is then right."""
    registry = metrics.registry
    found: dict[str, set[str]] = {}
    for collector, names in registry._collector_to_names.items():
        labels = set(getattr(collector, "_labelnames", ()))
        for name in names:
            found[name] = labels
    return found


def grafana(expr: str) -> str:
    for variable, value in GRAFANA.items():
        expr = expr.replace(variable, value)
    return expr


def queries() -> list[tuple[str, str]]:
    """(what, PromQL) for every dashboard panel target and template variable, and every
    alert expression."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = [
        (f"panel {panel['title']!r}", grafana(target["expr"]))
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]
    for variable in dashboard["templating"]["list"]:
        values = re.fullmatch(r"label_values\((.*), (\w+)\)", variable.get("query", ""))
        if values:
            found.append((f"variable {variable['name']!r}", grafana(values.group(1))))
    rules = YAML(typ="safe").load(ALERTS.read_text())["groups"][0]["rules"]
    found += [(f"alert {rule['alert']}", rule["expr"]) for rule in rules]
    return found


def test_every_panel_and_alert_query_runs_on_prometheus_and_is_right(
    prometheus: Prometheus, daemon: Daemon
) -> None:
    assert isinstance(daemon.metrics, Metrics)
    exported = declared(daemon.metrics)
    for name in prometheus.get("/api/v1/label/__name__/values")["data"]:
        if name.startswith("proxyfleet_") or name == "up":
            series = prometheus.query(f'{{__name__="{name}"}}')
            exported.setdefault(name, set()).update(*(s["metric"] for s in series))
    empty = []
    for what, expr in queries():
        result = prometheus.query(expr)
        if result:
            print(f"{what}: {len(result)} series")
            continue
        empty.append(what)
        for name, matchers in SELECTOR.findall(expr):
            assert name in exported, f"{what}: {name} is not a series the daemon exports"
            used = set(re.findall(r"(\w+)\s*[=!]~?", matchers)) - ALWAYS
            assert used <= exported[name], f"{what}: {name} has no label {used - exported[name]}"
        names = {name for name, _ in SELECTOR.findall(expr)}
        carried = set().union(*(exported[name] for name in names)) | ALWAYS
        for group in GROUPING.findall(expr):
            labels = {label.strip() for label in group.split(",") if label.strip()}
            assert labels <= carried, f"{what}: grouping by {labels - carried}, never set"
        print(f"{what}: empty; its metrics and labels exist, its condition does not hold")
    # The scenario makes most of them answer: a partial run, a leader, timed host calls.
    assert len(empty) <= len(queries()) // 2, empty


def test_the_alert_rules_are_loaded_and_evaluated_by_prometheus(prometheus: Prometheus) -> None:
    groups = prometheus.get("/api/v1/rules")["data"]["groups"]
    rules = {rule["name"]: rule for group in groups for rule in group["rules"]}
    shipped = YAML(typ="safe").load(ALERTS.read_text())["groups"][0]["rules"]
    assert set(rules) == {rule["alert"] for rule in shipped}
    assert all(rule["health"] == "ok" for rule in rules.values()), rules
    assert all(rule["annotations"]["runbook_url"] for rule in rules.values())


def test_every_zone_has_a_probe_path_series_at_0_while_none_is_suspect(
    prometheus: Prometheus, daemon: Daemon
) -> None:
    zones = prometheus.query("proxyfleet_probe_path_suspect")
    fleet_zones = {h.zone for h in daemon.reports[-1].hosts}
    assert fleet_zones and {z["metric"]["zone"] for z in zones} == fleet_zones, zones
    assert {float(z["value"][1]) for z in zones} == {0.0}
