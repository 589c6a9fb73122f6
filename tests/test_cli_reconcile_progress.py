"""``proxyfleet reconcile`` says what it waits for instead of an hour of silence."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from reports import report

from reconciler.adapters.surface.controlsocket import ControlServer
from reconciler.cli import exitcodes, main, reconcile
from reconciler.engine.control import run_summary


def test_reconcile_prints_a_heartbeat_with_the_elapsed_time_until_the_run_finishes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines: list[str] = []
    heartbeat = threading.Event()

    def say(text: str) -> None:
        lines.append(text)
        if text.startswith("Still waiting"):
            heartbeat.set()

    def handle(_request: object, reply: Callable[[Mapping[str, Any]], None]) -> None:
        reply({"event": "queued", "runningNow": False})
        heartbeat.wait(60)  # the run "goes on" until the client has said it still waits
        reply({"event": "finished", "run": run_summary(report())})

    monkeypatch.setattr(reconcile, "say", say)
    monkeypatch.setattr(reconcile, "HEARTBEAT", 0.01)
    with tempfile.TemporaryDirectory(prefix="pf-beat-") as name:
        path = Path(name) / "control.sock"
        server = ControlServer(path, handle)
        server.start()
        try:
            assert main(["reconcile", "--socket", str(path)]) == exitcodes.OK
        finally:
            server.stop()
    # A heartbeat may come before the daemon's "queued" answer on a loaded machine (10 ms).
    assert "Run requested; waiting for its result." in lines, lines
    beats = [line for line in lines if line.startswith("Still waiting for the run: ")]
    assert beats and beats[0].startswith("Still waiting for the run: 0s so far"), lines


def test_elapsed_time_reads_as_seconds_minutes_or_hours() -> None:
    assert reconcile.elapsed(45.9) == "45s"
    assert reconcile.elapsed(125) == "2m05s"
    assert reconcile.elapsed(3720) == "1h02m"
