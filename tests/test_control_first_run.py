"""``get`` during the daemon's first run answers with what that run has observed so far
(its hosts, and the fleet's VMs on them, not checked yet) and says that the first run is in
progress, instead of "the daemon has not finished a run yet" for the whole run."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.surface.controlsocket import ControlServer
from reconciler.cli import main
from reconciler.engine.control import NOT_CHECKED, Control, RunBoard
from reconciler.engine.observe import Observation
from reconciler.model import Domain, DomainState, HostInventory, Inventory, Owner
from reconciler.model.report import HostStatus

OURS = Domain("pf-home-web-1-0123abcd", DomainState.RUNNING, Owner("home", "web-1", "d" * 64))
CRASHED = Domain("pf-home-web-2-0123abcd", DomainState.CRASHED, Owner("home", "web-2", "d" * 64))
OTHERS = Domain("pf-lab-web-1-0123abcd", DomainState.RUNNING, Owner("lab", "web-1", "d" * 64))
HAND_MADE = Domain("mail", DomainState.RUNNING)
SEEN = Observation(
    inventory=Inventory(
        (
            HostInventory("kvm01", True, (OURS, OTHERS, HAND_MADE)),
            HostInventory("kvm02", True, (CRASHED,)),
            HostInventory("kvm03", False, error="ssh: connection refused"),
        )
    ),
    hosts=(
        HostStatus("kvm01", True, zone="east", owned=1, foreign=2),
        HostStatus("kvm02", True, zone="west", owned=1),
        HostStatus("kvm03", False, error="ssh: connection refused", zone="west"),
    ),
    fleet="home",
)


@pytest.fixture
def sock() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="pf-ctl-") as name:  # short: a socket path
        yield Path(name) / "control.sock"


def first_run(observed: Observation | None) -> Control:
    board = RunBoard(lambda: None)
    board.start()  # the first run is going; none has finished
    return Control(board, reports=lambda: [], role=lambda: "", observed=lambda: observed)


def get(sock: Path, control: Control, capsys: pytest.CaptureFixture[str], *flags: str) -> str:
    server = ControlServer(sock, control.handle)
    server.start()
    try:
        assert main(["get", "--socket", str(sock), *flags]) == 0
    finally:
        server.stop()
    return capsys.readouterr().out


def test_get_during_the_first_run_shows_what_it_observed_and_says_the_run_is_going(
    sock: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = get(sock, first_run(SEEN), capsys)

    lines = out.splitlines()
    assert lines[0] == (
        "The daemon's first run is in progress; what it has observed so far (no proxy checked yet):"
    )
    rows = [line.split()[:5] for line in lines if line.startswith("web-")]
    assert rows == [
        ["web-1", "east", "kvm01", "running", "-"],
        ["web-2", "west", "kvm02", "crashed", "-"],
    ]  # the lab fleet's VM and the hand-made one are not this fleet's proxies
    assert all("unknown" in line and NOT_CHECKED in line for line in lines if "web-" in line)
    assert any(line.split()[:3] == ["kvm03", "west", "NO"] for line in lines), out


def test_get_json_during_the_first_run_marks_it_and_carries_the_observed_status(
    sock: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answer = json.loads(get(sock, first_run(SEEN), capsys, "--json"))

    assert answer["firstRun"] is True and answer["reconciling"] is True
    assert [p["name"] for p in answer["status"]["proxies"]] == ["web-1", "web-2"]
    assert [(h["name"], h["owned"]) for h in answer["status"]["hosts"]] == [
        ("kvm01", 1),
        ("kvm02", 1),
        ("kvm03", 0),
    ]


def test_get_before_the_first_run_observed_anything_says_the_run_is_in_progress(
    sock: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = get(sock, first_run(None), capsys)

    assert out == "The daemon's first run is in progress; it has observed nothing yet.\n"


def test_info_during_the_first_run_says_that_it_is_in_progress() -> None:
    assert first_run(SEEN).info("web-1") == {
        "error": "the daemon has not finished a run yet (its first run is in progress)"
    }
