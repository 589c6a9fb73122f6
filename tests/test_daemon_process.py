from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from daemonutil import wait_until

HERE = Path(__file__).parent


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def test_the_daemon_process_runs_on_sighup_and_exits_0_on_sigterm_after_the_action_in_flight(
    tmp_path: Path,
) -> None:
    log = tmp_path / "runs.log"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "fakedaemon.py"), str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert wait_until(lambda: "run 1 end" in lines(log), timeout=15), lines(log)
        proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: "run 2 end" in lines(log), timeout=10), lines(log)
        proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: "run 3 action 1 start" in lines(log), timeout=10)
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    output = proc.stdout.read().decode() if proc.stdout else ""
    assert code == 0, output
    got = lines(log)
    assert got[-4:] == ["run 3 action 1 done", "run 3 skipped 2", "run 3 end", "exit 0"], got
    assert not any(line.startswith("run 4") for line in got)


def test_proxyfleet_run_with_a_broken_config_exits_1_naming_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "proxyfleet.yaml"
    config.write_text("repo:\n  url: /srv/fleet\ninterval: fast\n")
    out = subprocess.run(
        [sys.executable, "-m", "reconciler", "run", "--config", str(config)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 1
    assert (
        f"{config}:3:1: interval: must be a number of seconds (at least 1) or a duration"
        in out.stderr
    )
