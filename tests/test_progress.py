"""Progress of downloads, uploads and apply's health wait: bars on a terminal, lines otherwise.

``tests/progressapply.py`` runs ``apply --yes`` over in-memory hosts with a real image
download; it runs here once with stdout on pipes and once on a pty, as an operator's
terminal.
"""

from __future__ import annotations

import logging
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reconciler.adapters.hypervisor.images import uploadstream
from reconciler.cli.progress import detail
from reconciler.progress import ProgressEvent

HERE = Path(__file__).parent
ROOT = HERE.parent
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def command(work: Path) -> list[str]:
    return [sys.executable, str(HERE / "progressapply.py"), str(work)]


def test_without_a_terminal_progress_is_plain_log_lines_and_no_bar(tmp_path: Path) -> None:
    done = subprocess.run(
        command(tmp_path), capture_output=True, text=True, timeout=120, check=False, cwd=ROOT
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stderr.splitlines()
    assert any("Image debian-12: 0.0 of 24.0 MiB downloaded" in line for line in lines), lines
    assert any("Image debian-12: downloaded 25165824 bytes in" in line for line in lines), lines
    assert any("Waiting for 3 proxies to pass their health check." in line for line in lines)
    assert sum("Health check" in line and "settled" in line for line in lines) == 3
    assert all(line.startswith("time=") for line in lines), lines
    assert "\x1b[" not in done.stdout + done.stderr and "━" not in done.stdout + done.stderr
    assert "Apply success: 3 succeeded" in done.stdout


def test_on_a_terminal_downloads_and_the_health_wait_show_bars_instead_of_lines(
    tmp_path: Path,
) -> None:
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        command(tmp_path), stdin=follower, stdout=follower, stderr=follower, cwd=ROOT
    )
    os.close(follower)
    seen = bytearray()
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None or select.select([leader], [], [], 0.1)[0]:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            if select.select([leader], [], [], 0.1)[0]:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # the pty closed with the process
                    break
                if not chunk:
                    break
                seen += chunk
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(leader)
    text = ANSI.sub("", seen.decode(errors="replace"))
    assert proc.returncode == 0, text
    assert re.search(r"download debian-12 +━+ +100% +25\.2/25\.2 MB", text), text
    assert re.search(r"health checks +━+ +100% +3/3 proxies, web-\d healthy", text), text
    assert "MiB downloaded" not in text and "settled" not in text  # bars, not lines
    assert "Apply success: 3 succeeded, 0 failed, 0 skipped; 3/3 proxies healthy." in text


def test_an_upload_reports_its_bytes_from_start_to_end(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="reconciler.progress"):
        progress = uploadstream.UploadLog("kvm01", "base-debian-12-abababababab.qcow2", 3_000_000)
        progress.add(1_000_000)
        progress.add(2_000_000)
        progress.done()
    events = [r.progress for r in caplog.records if hasattr(r, "progress")]
    assert [e.done for e in events] == [0, 3_000_000]
    assert events[-1].finished and not events[0].finished
    assert events[0].task == "upload kvm01 base-debian-12-abababababab.qcow2"
    assert "host kvm01: uploaded base-debian-12-abababababab.qcow2: 3.0 of 3.0 MB (100%)" in (
        caplog.records[-1].getMessage()
    )


def test_the_text_beside_a_bar_counts_bytes_or_proxies() -> None:
    assert detail(ProgressEvent("d", "d", 12e6, 40e6, "bytes")) == "12.0/40.0 MB"
    assert detail(ProgressEvent("d", "d", 5e6, None, "bytes")) == "5.0 MB"
    event = ProgressEvent("health", "health checks", 2, 3, "proxies", note="web-1 healthy")
    assert detail(event) == "2/3 proxies, web-1 healthy"
