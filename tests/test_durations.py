"""Durations in the daemon config: numbers of seconds, or 30s / 5m / 1h / 1h30m."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.core.load.durations import seconds
from reconciler.core.load.settings import load_settings
from reconciler.errors import ConfigError


@pytest.mark.parametrize(
    ("text", "expected"),
    [(300, 300.0), (2.5, 2.5), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("1h30m", 5400.0)],
)
def test_a_duration_is_seconds_or_numbers_with_units(text: str | float, expected: float) -> None:
    assert seconds(text) == expected


@pytest.mark.parametrize("text", ["5 minutes", "m5", "", "5d", "-5m"])
def test_anything_else_is_not_a_duration(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        seconds(text)


def test_the_daemon_interval_takes_a_duration_and_a_bad_one_names_file_and_line(
    tmp_path: Path,
) -> None:
    config = tmp_path / "proxyfleet.yaml"
    config.write_text("repo:\n  url: /srv/fleet.git\ninterval: 5m\n")
    assert load_settings(config).interval == 300.0

    config.write_text("repo:\n  url: /srv/fleet.git\ninterval: 5 minutes\n")
    with pytest.raises(ConfigError) as raised:
        load_settings(config)
    assert "proxyfleet.yaml:3:11: interval: must be a number of seconds" in str(raised.value)
    assert "30s, 5m, 1h" in str(raised.value)
