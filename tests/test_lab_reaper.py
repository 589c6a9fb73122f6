"""lab.reaper: a lab host's libvirtd runs under a subreaper, so an exited QEMU (an orphan
that daemonized) is reaped at once, as systemd reaps it on a hypervisor, and not by this
machine's PID 1 seconds later (which every ``virDomainDestroy`` waited for)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from daemonutil import wait_until

from lab import hosts
from lab.config import HostLayout

REPO = Path(__file__).resolve().parents[1]


def reaper(*argv: str, stderr: int | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "lab.reaper", *argv],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stderr=stderr,
    )


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def gone(pid: int) -> bool:
    """Reaped: no /proc entry at all (a zombie still has one)."""
    return not Path(f"/proc/{pid}").exists()


def test_an_orphan_of_the_wrapped_daemon_is_adopted_and_reaped_while_the_daemon_runs(
    tmp_path: Path,
) -> None:
    pidfile = tmp_path / "orphan"
    # The subshell starts a short sleep in the background and exits: the sleep is an
    # orphan, as a QEMU is once libvirtd's intermediate child exits.
    proc = reaper("bash", "-c", f"(sleep 0.5 & echo $! > {pidfile}); sleep 30")
    try:
        assert wait_until(lambda: pidfile.exists() and bool(pidfile.read_text().strip()), 10)
        orphan = int(pidfile.read_text())
        if not gone(orphan):
            assert parent_of(orphan) == proc.pid
        assert wait_until(lambda: gone(orphan), 10), "the orphan stayed a zombie"
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(10)


def test_sigterm_reaches_the_wrapped_daemon_and_the_reaper_exits_with_its_status(
    tmp_path: Path,
) -> None:
    ready = tmp_path / "ready"
    proc = reaper("bash", "-c", f"trap 'exit 7' TERM; touch {ready}; while :; do sleep 0.05; done")
    assert wait_until(ready.exists, 10)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 7


def test_the_reaper_exits_when_the_wrapped_daemon_exits() -> None:
    proc = reaper("bash", "-c", "exit 3")
    assert proc.wait(10) == 3


def test_a_daemon_that_cannot_be_run_exits_127_and_says_why() -> None:
    proc = reaper("/no/such/daemon", stderr=subprocess.PIPE)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 127
    assert "cannot run /no/such/daemon" in err.decode()


def test_every_lab_host_runs_libvirtd_under_the_reaper() -> None:
    layout = HostLayout(1)
    argv = dict(hosts._daemons(layout))["libvirtd"]
    assert argv[1:] == ["-m", "lab.reaper", "/usr/sbin/libvirtd"]
