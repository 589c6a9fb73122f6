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


def apply(work: Path, state: Path, *flags: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "reconciler", "apply", "--repo", str(work), "--state-dir",
         str(state), "--yes", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
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

        waiting = apply(remote.work, state, "--wait")
        time.sleep(3)
        assert waiting.poll() is None, waiting.communicate()
        stopped = time.monotonic()
        daemon.stop()
        assert daemon.proc.returncode == 0, daemon.output()
        out, err = waiting.communicate(timeout=60)
        assert time.monotonic() - stopped < 30
        assert waiting.returncode == 0, out + err
        assert "Waiting for the lock of fleet home, held by daemon on box-a" in err
        assert "No changes" in out
    finally:
        daemon.stop()
