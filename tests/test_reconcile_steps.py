"""``proxyfleet reconcile`` streams its run's steps: the lines the daemon logs for that run."""

from __future__ import annotations

import logging
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemonutil import real_daemon, running, wait_until
from reports import report

from reconciler.adapters.surface.controlsocket import ControlServer, request
from reconciler.engine.control import Control, Finished, RunBoard
from reconciler.logfields import carry
from reconciler.model.report import RunReport
from reconciler.model.settings import DaemonSettings, ListenSettings

log = logging.getLogger("reconciler.engine.steptest")


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pf-steps-") as name:  # unix socket paths are short
        yield Path(name)


@pytest.fixture(autouse=True)
def info_lines() -> Iterator[None]:
    logger = logging.getLogger("reconciler")
    level = logger.level
    logger.setLevel(logging.INFO)  # the daemon logs at INFO (cli.logsetup)
    yield
    logger.setLevel(level)


def test_a_waiter_follows_the_steps_of_its_own_run_and_not_of_the_run_going_when_it_asked() -> None:
    board = RunBoard(lambda: None)
    going = board.start()
    board.note("a step of the run going before")
    ticket = board.ask()
    board.note("another step of that run")
    board.finish(Finished(going, report(minute=1), ""))
    ours = board.start()
    board.note("first step of ours")
    board.note("second step of ours")
    board.finish(Finished(ours, report(minute=2), ""))
    board.note("a line between runs")
    followed = list(board.follow(ticket))
    assert followed[:-1] == ["first step of ours", "second step of ours"]
    assert isinstance(followed[-1], Finished) and followed[-1].number == ours


def test_a_waiter_sees_the_steps_as_they_come_while_the_run_goes_on() -> None:
    board = RunBoard(lambda: None)
    ticket = board.ask()
    number = board.start()
    steps = board.follow(ticket)
    board.note("creating web-1")
    assert next(steps) == "creating web-1"  # before the run has finished
    board.note("web-1 healthy")
    board.finish(Finished(number, report(minute=1), ""))
    assert next(steps) == "web-1 healthy"
    assert isinstance(next(steps), Finished)
    assert list(steps) == []


def test_a_waiter_is_released_without_a_result_when_the_daemon_stops() -> None:
    board = RunBoard(lambda: None)
    ticket = board.ask()
    board.start()
    board.note("creating web-1")
    steps = board.follow(ticket)
    assert next(steps) == "creating web-1"
    board.close()
    assert list(steps) == []


class LoggingCycle:
    """A run that logs on its own thread, on a carried worker thread and on a stranger."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, stop: threading.Event) -> RunReport:
        self.calls += 1
        log.info("Creating web-%d on kvm01.", self.calls)
        worker = threading.Thread(target=carry(log.info), args=("web-%d is healthy.", self.calls))
        stranger = threading.Thread(target=log.info, args=("A line of another thread.",))
        for thread in (worker, stranger):
            thread.start()
            thread.join()
        log.debug("A debug line the journal does not show either.")
        return report(minute=self.calls)


def test_reconcile_over_the_socket_streams_the_lines_the_daemon_logs_for_that_run(
    tmp_path: Path, sock_dir: Path
) -> None:
    settings = DaemonSettings(
        interval=3600, listen=ListenSettings("127.0.0.1", 0), state_dir=tmp_path / "state"
    )
    cycle = LoggingCycle()
    daemon = real_daemon(settings, cycle)
    path = sock_dir / "control.sock"
    with running(daemon):
        assert wait_until(lambda: cycle.calls == 1)
        control = Control(daemon.runs, reports=lambda: daemon.reports, role=lambda: "")
        server = ControlServer(path, control.handle)
        server.start()
        try:
            answers = list(request(path, {"command": "reconcile"}, timeout=30))
        finally:
            server.stop()
    assert answers[0]["event"] == "queued"
    assert answers[-1]["event"] == "finished"
    steps = [a["message"] for a in answers[1:-1]]
    assert all(a["event"] == "step" for a in answers[1:-1])
    assert steps[0].startswith("Reconcile started (")
    assert steps[1:3] == ["Creating web-2 on kvm01.", "web-2 is healthy."]
    assert steps[-1].startswith("Reconcile finished: ")
    assert not any("another thread" in s or "debug" in s or "web-1" in s for s in steps), steps
