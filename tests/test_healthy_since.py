""" "Healthy since" comes from the history the engine keeps (history.json): the same in
``get``, ``info`` and STATUS.md, and it stays put when the runs a daemon holds in memory roll
off (it folded only those before)."""

from __future__ import annotations

from pathlib import Path

from enginefakes import FleetRepo

from reconciler.adapters.git.statuswriter import MemoryStatusSink
from reconciler.adapters.state.historystore import FileHistoryStore
from reconciler.core.status import statusdoc
from reconciler.core.status.statusmd import render_markdown
from reconciler.engine.control import Control, RunBoard
from reconciler.model.report import RunReport

HELD = 10
"""Runs the daemon holds in memory (``Daemon.reports``)."""


def test_healthy_since_is_the_recorded_first_pass_in_get_info_and_status_md(
    tmp_path: Path,
) -> None:
    (tmp_path / "repo").mkdir()
    world = FleetRepo(tmp_path / "repo")
    world.engine.history = FileHistoryStore(tmp_path / "history.json")
    reports: list[RunReport] = []
    for _ in range(HELD + 3):
        reports.append(world.cycle())
        world.time.sleep(60)
    first_pass = statusdoc.timestamp(reports[0].finished)
    control = Control(
        RunBoard(lambda: None),
        reports=lambda: reports[-HELD:],  # the first runs rolled off
        role=lambda: "",
        history=world.engine.history.load,
    )
    sink = MemoryStatusSink()
    for report in reports:
        sink.publish(report)

    got = {p["name"]: p["since"] for p in control.get()["status"]["proxies"]}
    assert got == {"web-1": first_pass, "web-2": first_pass, "web-3": first_pass}
    assert {p["name"]: p["since"] for p in sink.documents[-1]["proxies"]} == got
    # Even a status built from the last run alone (no earlier document to fold) says so.
    alone = render_markdown(statusdoc.build(reports[-1], None, runs=[]))
    rows = [line for line in alone.splitlines() if line.startswith("| web-")]
    assert len(rows) == 3 and all(f"| {first_pass} |" in row for row in rows)
    info = control.info("web-2")
    assert info["proxy"]["since"] == info["history"]["healthySince"] == first_pass


def test_a_daemon_restart_keeps_healthy_since_from_the_history_file(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    world = FleetRepo(tmp_path / "repo")
    world.engine.history = FileHistoryStore(tmp_path / "history.json")
    first = world.cycle()
    world.time.sleep(600)
    restarted = FleetRepo(tmp_path / "repo")  # a new engine, the same hosts and state dir
    restarted.hosts = world.hosts
    restarted.engine.history = FileHistoryStore(tmp_path / "history.json")
    restarted.time.sleep(world.time.elapsed)

    again = restarted.cycle()

    assert {p.since for p in again.proxies} == {first.finished.replace(microsecond=0)}
