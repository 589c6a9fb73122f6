"""The shipped deploy/ files checked by the tools that will consume them."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from reconciler.adapters.surface.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent
UNIT = ROOT / "deploy" / "systemd" / "proxyfleet.service"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yaml"
DASHBOARD = ROOT / "deploy" / "grafana" / "proxyfleet.json"
OPERATIONS = ROOT / "docs" / "operations.md"
METRIC = re.compile(r"\b(proxyfleet_[a-z_]+)")


def tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} is missing; `make deps` installs it (Makefile APT_PACKAGES)"
    return path


def run(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, check=False, cwd=cwd)


@pytest.fixture
def unit_here(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this checkout's console script (verify checks it)."""
    script = Path(sys.executable).parent / "proxyfleet"
    text = UNIT.read_text().replace("/opt/proxyfleet/bin/proxyfleet", str(script))
    target = tmp_path / "proxyfleet.service"
    target.write_text(text)
    return target


def test_the_unit_passes_systemd_analyze_verify(unit_here: Path) -> None:
    out = run(tool("systemd-analyze"), "verify", str(unit_here))
    assert out.returncode == 0 and out.stderr.strip() == "", out.stderr


def test_the_unit_scores_1_5_or_better_in_systemd_analyze_security(unit_here: Path) -> None:
    out = run(tool("systemd-analyze"), "security", "--offline=yes", str(unit_here))
    found = re.search(r"Overall exposure level for proxyfleet\.service: (\d+\.\d+)", out.stdout)
    assert found, out.stdout + out.stderr
    score = float(found.group(1))
    print(f"systemd-analyze security exposure: {score}")
    assert score <= 1.5


def test_the_unit_bounds_memory_tasks_descriptors_exec_and_binds() -> None:
    settings = {
        line.split("=", 1)[0]: line.split("=", 1)[1]
        for line in UNIT.read_text().splitlines()
        if "=" in line and not line.startswith("#")
    }
    for key in (
        "MemoryMax",
        "TasksMax",
        "LimitNOFILE",
        "NoExecPaths",
        "SocketBindAllow",
        "SocketBindDeny",
        "RuntimeDirectory",
    ):
        assert settings.get(key), key
    assert settings["NoExecPaths"] == "/" and settings["SocketBindDeny"] == "any"


def test_the_unit_is_the_notify_service_the_daemon_expects() -> None:
    lines = set(UNIT.read_text().splitlines())
    for line in (
        "Type=notify",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "StateDirectory=proxyfleet",
        "ConfigurationDirectory=proxyfleet",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "ReadWritePaths=/var/lib/proxyfleet",
        "CapabilityBoundingSet=",
        "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
    ):
        assert line in lines, line
    assert any(line.startswith("WatchdogSec=") for line in lines)


def test_the_alert_rules_pass_promtool_check_and_their_tests() -> None:
    promtool = tool("promtool")
    checked = run(promtool, "check", "rules", str(ALERTS))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    tested = run(promtool, "test", "rules", "alerts_test.yaml", cwd=ALERTS.parent)
    assert tested.returncode == 0, tested.stdout + tested.stderr


def exported_names() -> set[str]:
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    return {
        family.name + suffix
        for family in Metrics().registry.collect()
        for suffix in suffixes.get(family.type, ("",))
    }


def test_every_metric_the_alerts_and_the_dashboard_use_is_exported() -> None:
    exported = exported_names()
    used = set(METRIC.findall(ALERTS.read_text())) | set(METRIC.findall(DASHBOARD.read_text()))
    assert used, "no proxyfleet_ metric referenced"
    assert sorted(used - exported) == []


def test_the_dashboard_is_grafana_json_with_a_query_per_panel() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "proxyfleet"
    assert all(panel["targets"] and panel["targets"][0]["expr"] for panel in dashboard["panels"])


def test_operations_doc_explains_every_alert() -> None:
    doc = OPERATIONS.read_text()
    rules = YAML(typ="safe").load(ALERTS.read_text())["groups"][0]["rules"]
    for rule in rules:
        assert f"### {rule['alert']}" in doc, rule["alert"]


def test_operations_doc_covers_every_config_key() -> None:
    doc = OPERATIONS.read_text()
    schema = json.loads((ROOT / "schemas" / "daemon.schema.json").read_text())

    def keys(node: dict, prefix: str) -> list[str]:
        out = []
        for name, sub in node.get("properties", {}).items():
            path = f"{prefix}{name}"
            out.append(path)
            out += keys(sub, f"{path}.")
        return out

    missing = [key for key in keys(schema, "") if f"`{key}`" not in doc]
    assert missing == []


def test_the_metrics_table_lists_every_metric_the_daemon_registers() -> None:
    doc = OPERATIONS.read_text()
    table = doc[doc.index("## Metrics") : doc.index("## Alerts")]
    rows = set(re.findall(r"^\| `(proxyfleet_[a-z_]+)` \|", table, flags=re.MULTILINE))
    registered = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in Metrics().registry.collect()
    }
    assert sorted(registered - rows) == [], "rows missing from docs/operations.md, Metrics"
    assert sorted(rows - registered) == [], "rows for metrics the daemon does not register"


def test_every_alert_links_its_runbook_in_the_operations_doc() -> None:
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
        for line in OPERATIONS.read_text().splitlines()
        if line.startswith("#")
    }
    rules = YAML(typ="safe").load(ALERTS.read_text())["groups"][0]["rules"]
    for rule in rules:
        url = rule["annotations"].get("runbook_url", "")
        path, _, anchor = url.partition("#")
        assert path == "docs/operations.md" and anchor in anchors, (rule["alert"], url)
    runbooks = OPERATIONS.read_text()[OPERATIONS.read_text().index("## Alerts") :]
    assert "virsh console" not in runbooks, "runbooks send operators to `proxyfleet console`"
