"""The default file lock on one box: a daemon process and ``proxyfleet apply`` beside it.

Real processes, a real git remote, the real tooz file lock in a shared state dir; the
daemon's hypervisors are in memory (the subject is the lock), apply's fleet has none.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from daemonutil import wait_until
from lockprocs import ROOT, fleet_remote, start_daemon


def apply(
    work: Path, state: Path, *flags: str, stderr: Path | None = None
) -> subprocess.Popen[str]:
    """``proxyfleet apply``; its stderr to the file ``stderr`` when given (to be read while
    it runs), else to a pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "reconciler", "apply", "--repo", str(work), "--state-dir",
         str(state), "--yes", *flags],
        stdout=subprocess.PIPE,
        stderr=stderr.open("w") if stderr is not None else subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


def test_apply_beside_a_leading_daemon_refuses_naming_it_and_with_wait_runs_once_it_stops(
    tmp_path: Path,
) -> None:
    remote = fleet_remote(tmp_path, 0, hosts=False)
    state = tmp_path / "state"
    daemon = start_daemon(
        tmp_path, "box-a", repo_url=remote.url, log=tmp_path / "mutations.log", state_dir=state
    )
    try:
        assert wait_until(daemon.leads, timeout=30), daemon.output()

        refused = apply(remote.work, state)
        out, err = refused.communicate(timeout=60)
        assert refused.returncode == 1, out + err
        assert re.search(
            rf"fleet home is locked by daemon on box-a \(pid {daemon.proc.pid}, since "
            r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC\); nothing was applied",
            err,
        ), err
        assert out == ""

        log = tmp_path / "waiting.stderr"
        waiting = apply(remote.work, state, "--lock-timeout", "forever", stderr=log)
        # It waits (however long its start takes on a loaded machine), and goes on waiting.
        assert wait_until(
            lambda: (
                "Waiting for the lock of fleet home, held by daemon on box-a" in log.read_text()
            ),
            timeout=60,
        ), log.read_text()
        time.sleep(2)
        assert waiting.poll() is None, waiting.communicate()
        stopped = time.monotonic()
        daemon.stop()
        assert daemon.proc.returncode == 0, daemon.output()
        out, _ = waiting.communicate(timeout=60)
        err = log.read_text()
        assert time.monotonic() - stopped < 30
        assert waiting.returncode == 0, out + err
        assert "No changes" in out
    finally:
        daemon.stop()
