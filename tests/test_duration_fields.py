"""Every ``*Seconds`` field of the daemon config and the fleet repo takes a duration too."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_manifests import MINIMAL_FLEET, write_repo

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.core.load.settings import parse_settings
from reconciler.errors import ConfigError, InvalidInput

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def seconds_fields(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key.endswith("Seconds") and isinstance(value, dict):
                yield f"{path}.{key}", value
            yield from seconds_fields(value, f"{path}.{key}")
    elif isinstance(node, list):
        for item in node:
            yield from seconds_fields(item, path)


@pytest.mark.parametrize("name", ["daemon", "proxy", "fleet", "proxyset"])
def test_every_seconds_field_of_the_schemas_accepts_a_duration_string(name: str) -> None:
    schema = json.loads((SCHEMAS / f"{name}.schema.json").read_text())
    for path, field in seconds_fields(schema):
        assert field.get("x-duration") is True, path
        assert "string" in field["type"], path


def test_the_daemon_config_takes_durations_and_seconds_in_its_seconds_fields() -> None:
    text = (
        "repo:\n  url: git@example.org:fleet.git\n  fetchTimeoutSeconds: 2m\n"
        "ssh:\n  connectTimeoutSeconds: 15s\n  callTimeoutSeconds: 90\n"
        "  keepaliveIntervalSeconds: 1m\n"
        "replaceTimeoutSeconds: 15m\ndeleteWindowSeconds: 1h30m\nhungAfterSeconds: 2h\n"
        "coordination:\n  ttlSeconds: 30s\n"
    )
    settings = parse_settings(text, name="proxyfleet.yaml", base=Path("/etc/proxyfleet"))
    assert settings.repo.fetch_timeout == 120.0
    assert (settings.ssh.connect_timeout, settings.ssh.call_timeout) == (15.0, 90.0)
    assert settings.ssh.keepalive_interval == 60.0
    assert (settings.replace_timeout, settings.delete_window) == (900.0, 5400.0)
    assert (settings.hung_after, settings.coordination.ttl) == (7200.0, 30.0)


def test_a_duration_outside_the_fields_range_is_refused_like_the_number_would_be() -> None:
    text = "repo:\n  url: x\nreplaceTimeoutSeconds: 3h\ncoordination:\n  ttlSeconds: 2.5s\n"
    with pytest.raises(ConfigError) as err:
        parse_settings(text, name="proxyfleet.yaml", base=Path("/etc/proxyfleet"))
    lines = str(err.value).splitlines()
    assert "proxyfleet.yaml:3:24: replaceTimeoutSeconds: must be at most 7200 s (got '3h')" in lines
    assert any("ttlSeconds: must be at least 3 s (got '2.5s')" in line for line in lines), lines


def test_a_proxys_health_times_take_durations(tmp_path: Path) -> None:
    proxy = (
        "kind: Proxy\nmetadata:\n  name: p1\nspec:\n"
        "  placement: {zone: z1, image: deb, machineType: small}\n"
        "  health: {timeoutSeconds: 5s, replaceAfterSeconds: 15m, restartWindowSeconds: 2h}\n"
    )
    repo = load_repo_at(write_repo(tmp_path, {"fleet.yaml": MINIMAL_FLEET, "p1.yaml": proxy}))
    health = repo.proxies[0].health
    assert (health.timeout_seconds, health.replace_after_seconds) == (5.0, 900.0)
    assert health.restart_window_seconds == 7200.0


def test_a_malformed_duration_is_named_with_its_file_line_and_field(tmp_path: Path) -> None:
    proxy = (
        "kind: Proxy\nmetadata:\n  name: p1\nspec:\n"
        "  placement: {zone: z1, image: deb, machineType: small}\n"
        "  health: {timeoutSeconds: soon, restartWindowSeconds: 90.5s}\n"
    )
    with pytest.raises(InvalidInput) as err:
        load_repo_at(write_repo(tmp_path, {"fleet.yaml": MINIMAL_FLEET, "p1.yaml": proxy}))
    problems = [str(p) for p in err.value.problems]
    assert (
        "p1.yaml:6:28: spec.health.timeoutSeconds: must be seconds or a duration such as "
        "30s, 10m, 1h or 1h30m (got 'soon')" in problems
    ), problems
    assert any("restartWindowSeconds: must be whole seconds (got '90.5s')" in p for p in problems)
