"""The ``proxyfleet`` program's exit: one code per outcome for every command (docs/operations.md,
"Exit codes"), and no last walk of its heap (docs/performance.md, 2a)."""

from __future__ import annotations

import dataclasses
import gc
import logging
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from daemonutil import real_daemon
from enginefakes import FleetRepo
from reports import ready, report

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.adapters.surface.controlsocket import ControlServer
from reconciler.cli import apply, build_parser, command, exitcodes, main, reconcile
from reconciler.core.load.inventory import dump_inventory
from reconciler.engine.control import run_summary
from reconciler.errors import TransientError
from reconciler.model import HostInventory, Inventory
from reconciler.model.report import RunResult
from reconciler.model.settings import DaemonSettings

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "fleet-repo"


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


@pytest.mark.usefixtures("unfrozen")
def test_the_program_freezes_what_the_command_built_so_the_exit_does_not_walk_it() -> None:
    assert gc.get_freeze_count() == 0
    code = command(["validate", str(EXAMPLE)])
    assert code == 0
    assert gc.get_freeze_count() > 0


@pytest.mark.usefixtures("unfrozen")
def test_main_as_tests_call_it_leaves_the_collector_alone() -> None:
    assert main(["validate", str(EXAMPLE)]) == 0
    assert gc.get_freeze_count() == 0


# -- one exit-code scheme (docs/operations.md, "Exit codes") -----------------------------


def test_a_usage_error_exits_64_which_no_outcome_shares(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (["plan", "--jsn"], ["nosuch"], ["reconcile", "--timeout", "soon"], []):
        with pytest.raises(SystemExit) as exited:
            main(argv)
        assert exited.value.code == exitcodes.USAGE == 64, argv
        assert "error:" in capsys.readouterr().err
    outcomes = {exitcodes.OK, exitcodes.ERROR, exitcodes.CHANGES, exitcodes.DEGRADED}
    assert exitcodes.USAGE not in outcomes | {exitcodes.STANDBY, exitcodes.INTERRUPTED}


def test_validate_exits_0_on_a_valid_repo_and_1_on_an_invalid_one(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text("kind: Fleet\nspec: [\n")
    assert main(["validate", str(EXAMPLE)]) == exitcodes.OK
    assert main(["validate", str(tmp_path)]) == exitcodes.ERROR


def _plan(repo: Path, inventory: Inventory, tmp_path: Path) -> int:
    path = tmp_path / "inventory.json"
    path.write_text(dump_inventory(inventory))
    return main(["plan", "--repo", str(repo), "--inventory", str(path)])


def test_plan_exits_2_for_changes_and_3_when_a_host_was_not_read(tmp_path: Path) -> None:
    repo = load_repo_at(EXAMPLE)
    names = [h.name for h in repo.fleet.hosts]
    empty = Inventory(hosts=tuple(HostInventory(n, True) for n in names))
    unread = Inventory(hosts=tuple(HostInventory(n, False, error="ssh: refused") for n in names))
    assert _plan(EXAMPLE, empty, tmp_path) == exitcodes.CHANGES
    assert _plan(EXAMPLE, unread, tmp_path) == exitcodes.DEGRADED
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "fleet.yaml").write_text("kind: Fleet\n")
    assert _plan(tmp_path / "broken", empty, tmp_path) == exitcodes.ERROR


def _apply(world: FleetRepo) -> int:
    args = build_parser().parse_args(["apply", "--repo", str(world.root), "--yes"])
    return apply.apply_with(args, world.engine)


def test_apply_exits_0_when_ready_and_3_when_every_host_is_unreachable(tmp_path: Path) -> None:
    world = FleetRepo(tmp_path)
    assert _apply(world) == exitcodes.OK
    for host in world.hosts.values():
        host.fail("observe", TransientError("ssh: connection refused"), times=None)
    assert _apply(world) == exitcodes.DEGRADED


def test_apply_and_reconcile_give_one_code_for_one_run() -> None:
    cases = {
        exitcodes.OK: report(),
        exitcodes.DEGRADED: report(reachable=False, result=RunResult.SUCCESS),
        exitcodes.ERROR: report(result=RunResult.STALLED),
    }
    for expected, run in cases.items():
        if expected == exitcodes.DEGRADED:  # success, but a host unreachable: not Ready
            run = dataclasses.replace(run, conditions=ready(False))
        assert apply.exit_code(run) == expected, run.result
        assert reconcile.run_exit_code(run_summary(run)) == expected, run.result
    partial = report(result=RunResult.PARTIAL)
    assert apply.exit_code(partial) == reconcile.run_exit_code(run_summary(partial)) == 3


def test_reconcile_exits_3_for_a_successful_run_that_left_the_fleet_not_ready() -> None:
    run = dataclasses.replace(report(reachable=False), conditions=ready(False))
    assert run.result is RunResult.SUCCESS
    assert reconcile.run_exit_code(run_summary(run)) == exitcodes.DEGRADED


def test_a_daemon_that_reached_no_host_logs_and_answers_degraded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    unreached = dataclasses.replace(
        report(),
        hosts=tuple(dataclasses.replace(h, reachable=False) for h in report().hosts),
    )
    settings = DaemonSettings(interval=3600, state_dir=tmp_path / "state")
    daemon = real_daemon(settings, lambda stop: unreached, serve_http=False)
    with caplog.at_level(logging.INFO, logger="reconciler"):
        daemon.run_once(["test"])
    finished = [r.getMessage() for r in caplog.records if "Reconcile finished" in r.getMessage()]
    assert finished == [
        "Reconcile finished: degraded: no host could be reached (2 of 2); "
        "success at 111111111111 in 4.0s; Ready; 1 proxies, 0 problems."
    ]
    healthy, text = daemon.health()
    assert healthy  # the daemon works; the hosts do not
    assert text.startswith("degraded: no host could be reached (2 of 2); last cycle completed")

    reached = real_daemon(settings, lambda stop: report(reachable=False), serve_http=False)
    reached.run_once(["test"])
    assert reached.health()[1].startswith("ok: ")  # one host of two answered


def answering(lines: list[dict[str, Any]]) -> Callable[[Any, Callable[[Any], None]], None]:
    """A control-socket handler that answers every request with ``lines``."""

    def handle(_request: Any, reply: Callable[[Any], None]) -> None:
        for line in lines:
            reply(line)

    return handle


def test_reconcile_exits_by_the_runs_outcome_over_the_control_socket() -> None:
    not_ready = dataclasses.replace(report(reachable=False), conditions=ready(False))
    finished = [
        (report(), exitcodes.OK),
        (not_ready, exitcodes.DEGRADED),  # succeeded, a host unreachable: not Ready
        (report(result=RunResult.PARTIAL), exitcodes.DEGRADED),
        (report(result=RunResult.STALLED), exitcodes.ERROR),
    ]
    cases = [
        ([{"event": "queued"}, {"event": "finished", "run": run_summary(run)}], code)
        for run, code in finished
    ]
    cases.append(([{"event": "queued"}, {"event": "standby", "role": "x"}], exitcodes.STANDBY))
    with tempfile.TemporaryDirectory(prefix="pf-exit-") as name:
        path = Path(name) / "control.sock"
        for lines, expected in cases:
            server = ControlServer(path, answering(lines))
            server.start()
            try:
                assert main(["reconcile", "--socket", str(path)]) == expected, lines
            finally:
                server.stop()
        assert main(["reconcile", "--socket", str(path)]) == exitcodes.ERROR  # no daemon
