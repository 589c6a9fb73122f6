"""``proxyfleet deploy print``: the unit, alerts and dashboard from the package itself."""

from __future__ import annotations

from pathlib import Path

import pytest

from reconciler.cli import exitcodes, main
from reconciler.cli.deployfiles import unit_for

ROOT = Path(__file__).resolve().parents[1]
UNIT = (ROOT / "deploy" / "systemd" / "proxyfleet.service").read_text()


@pytest.mark.parametrize(
    ("what", "path"),
    [("alerts", "prometheus/alerts.yaml"), ("dashboard", "grafana/proxyfleet.json")],
)
def test_deploy_print_gives_the_shipped_file_unchanged(
    what: str, path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["deploy", "print", what]) == exitcodes.OK
    assert capsys.readouterr().out == (ROOT / "deploy" / path).read_text()


def test_the_printed_unit_runs_the_given_venv_and_allows_exec_from_it_and_nothing_else(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["deploy", "print", "unit", "--prefix", "/srv/pf"]) == exitcodes.OK
    printed = capsys.readouterr().out.splitlines()
    shipped = UNIT.splitlines()
    changed = [(a, b) for a, b in zip(shipped, printed, strict=True) if a != b]
    assert changed[0] == (
        "ExecStart=/opt/proxyfleet/bin/proxyfleet run --config /etc/proxyfleet/proxyfleet.yaml",
        "ExecStart=/srv/pf/bin/proxyfleet run --config /etc/proxyfleet/proxyfleet.yaml",
    )
    assert changed[1][1].startswith("ExecPaths=/usr /srv/pf")
    assert len(changed) == 2


def test_the_unit_for_the_documented_venv_is_the_shipped_unit() -> None:
    assert unit_for(UNIT, prefix=Path("/opt/proxyfleet"), python=Path("/usr")) == UNIT


def test_a_base_python_outside_usr_is_allowed_to_run_too() -> None:
    unit = unit_for(UNIT, prefix=Path("/srv/pf"), python=Path("/usr/local/python3.12"))
    assert "ExecPaths=/usr /srv/pf\n" in unit  # /usr/local is under /usr
    unit = unit_for(UNIT, prefix=Path("/srv/pf"), python=Path("/opt/python3.12"))
    assert "ExecPaths=/usr /srv/pf /opt/python3.12\n" in unit
