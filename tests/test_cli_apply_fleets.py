"""``proxyfleet apply`` with a daemon config that lists several fleets: the repo's fleet
gets what the daemon gives it (its pin, its state dir with the delete window)."""

from __future__ import annotations

from pathlib import Path

from reconciler.cli import build_parser, compose
from reconciler.cli.common import fleet_settings
from reconciler.engine.runtime import Runtime
from reconciler.model.settings import DaemonSettings, FleetSettings, RepoSettings


def several(state: Path) -> DaemonSettings:
    return DaemonSettings(
        state_dir=state,
        fleets=(
            FleetSettings("home", RepoSettings(url="/srv/home")),
            FleetSettings("lab", RepoSettings(url="/srv/lab")),
        ),
    )


def test_the_repos_fleet_gets_its_entrys_settings_and_an_unlisted_one_the_configs() -> None:
    settings = several(Path("/var/lib/pf"))

    lab = fleet_settings(settings, "lab")

    assert (lab.fleet, lab.repo.url) == ("lab", "/srv/lab")
    assert lab.state_dir == Path("/var/lib/pf/fleets/lab")
    assert fleet_settings(settings, "other") is settings


def test_apply_records_deletes_where_the_daemon_of_that_fleet_does(tmp_path: Path) -> None:
    lab = fleet_settings(several(tmp_path / "config"), "lab")
    args = build_parser().parse_args(["apply", "--state-dir", str(tmp_path / "flag")])

    engine = compose.apply_engine(args, lab, runtime=Runtime.interruptible(), fleets=True)
    try:
        assert engine.guards.fleet == "lab"
        assert engine.guards.state_file == tmp_path / "flag" / "fleets" / "lab" / "deletes.json"
    finally:
        engine.close()
