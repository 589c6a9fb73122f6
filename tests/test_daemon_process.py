from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from daemonutil import wait_until
from gitutil import git
from lockprocs import ROOT, fleet_files, fleet_remote, fleet_remotes, start_daemon

from reconciler.adapters.coordination.toozlock import default_url

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
        f"{config}:3:11: interval: must be a number of seconds (at least 1) or a duration"
        in out.stderr
    )


def proxyfleet(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reconciler", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_reconcile_get_and_info_ask_a_running_daemon_process_over_its_control_socket(
    tmp_path: Path,
) -> None:
    """Issue 16: the real daemon (``serve``: git source, file lock, in-memory hypervisors) as
    a process, asked by ``proxyfleet reconcile``/``get``/``info`` as processes; a second
    daemon standing by for the same fleet says so and names the leader."""
    remote = fleet_remote(tmp_path, 2)
    mutations = tmp_path / "mutations.log"
    with tempfile.TemporaryDirectory(prefix="pf-") as short:  # unix socket paths are short
        state_a, state_b = Path(short) / "a", Path(short) / "b"
        leader = start_daemon(
            tmp_path, "box-a", repo_url=remote.url, log=mutations, state_dir=state_a
        )
        standby = None
        try:
            assert wait_until(leader.leads, timeout=60), leader.output()
            sock = state_a / "control.sock"
            assert stat.S_IMODE(sock.lstat().st_mode) == 0o600

            done = proxyfleet("reconcile", "--state-dir", str(state_a))
            revision = git(remote.work, "rev-parse", "HEAD")
            assert done.returncode == 0, done.stdout + done.stderr
            assert "Run requested" in done.stderr
            streamed = done.stderr.splitlines()  # the run's steps as the daemon logged them
            assert any(line.startswith("  Reconcile started (") for line in streamed), streamed
            assert "  Planned 0 change(s): 2 keep." in streamed
            assert any(line.startswith("  Reconcile finished: ") for line in streamed), streamed
            assert done.stdout.startswith(f"Run success at {revision[:12]} in "), done.stdout
            assert "Ready; 2/2 proxies healthy." in done.stdout

            got = proxyfleet("get", "--state-dir", str(state_a), "--json")
            assert got.returncode == 0, got.stderr
            answer = json.loads(got.stdout)
            assert answer["role"] == "leader of fleet home"
            proxies = {p["name"]: p for p in answer["status"]["proxies"]}
            assert set(proxies) == {"web-1", "web-2"}
            assert all(p["state"] == "running" and p["ip"] for p in proxies.values()), proxies
            table = proxyfleet("get", "--state-dir", str(state_a))
            assert table.returncode == 0
            assert any(line.split()[:4] == ["web-1", "a", "kvm01", "running"]
                       for line in table.stdout.splitlines()), table.stdout  # fmt: skip

            info = proxyfleet("info", "web-1", "--state-dir", str(state_a))
            assert info.returncode == 0, info.stderr
            assert f"VM:            {proxies['web-1']['domain']}" in info.stdout
            assert f"From commit:   {revision}" in info.stdout  # the VM's own metadata

            remote.commit({"fleet.yaml": "kind: Fleet\nspec: [\n"}, "broken")
            stalled = proxyfleet("reconcile", "--state-dir", str(state_a))
            assert stalled.returncode == 1, stalled.stdout + stalled.stderr
            assert stalled.stdout.startswith("Run stalled at "), stalled.stdout
            assert "  problem: fleet.yaml:" in stalled.stdout

            standby = start_daemon(
                tmp_path,
                "box-b",
                repo_url=remote.url,
                log=mutations,
                coordination_url=default_url(state_a),
                state_dir=state_b,
            )
            remote.commit(fleet_files(2), "fixed")
            assert wait_until(standby.stands_by, timeout=60), standby.output()
            asked = proxyfleet("reconcile", "--state-dir", str(state_b))
            assert asked.returncode == 4, asked.stdout + asked.stderr
            assert "this daemon stands by (standby for fleet home, led by daemon on box-a" in (
                asked.stderr
            ), standby.health() + standby.output()[-3000:]
            listed = proxyfleet("get", "--state-dir", str(state_b))
            assert listed.returncode == 4 and "led by daemon on box-a" in listed.stderr
        finally:
            if standby is not None:
                standby.stop()
            leader.stop()
        assert leader.proc.returncode == 0, leader.output()
        assert not (state_a / "control.sock").exists()


def test_a_daemon_of_several_fleets_answers_reconcile_and_get_per_fleet_named_with_fleet(
    tmp_path: Path,
) -> None:
    """A daemon whose config lists fleets has a control socket per fleet, in that fleet's
    state dir; ``--fleet`` picks one, and asking without it names the fleets."""
    urls = fleet_remotes(tmp_path, ["home", "lab"], 1)
    with tempfile.TemporaryDirectory(prefix="pf-") as short:
        state = Path(short)
        daemon = start_daemon(
            tmp_path,
            "box-a",
            repo_url="",
            log=tmp_path / "mutations.log",
            coordination_url=f"file://{tmp_path / 'locks'}",
            state_dir=state,
            fleets=urls,
        )
        try:
            assert wait_until(
                lambda: daemon.roles() == {"home": "leader", "lab": "leader"}, timeout=60
            ), daemon.health() + daemon.output()[-3000:]
            for fleet in ("home", "lab"):
                sock = state / "fleets" / fleet / "control.sock"
                assert stat.S_IMODE(sock.lstat().st_mode) == 0o600
                done = proxyfleet("reconcile", "--state-dir", short, "--fleet", fleet)
                revision = git(Path(urls[fleet].removeprefix("file://")), "rev-parse", "HEAD")
                assert done.returncode == 0, done.stdout + done.stderr
                assert done.stdout.startswith(f"Run success at {revision[:12]} in "), done.stdout
                got = proxyfleet("get", "--state-dir", short, "--fleet", fleet, "--json")
                answer = json.loads(got.stdout)
                assert answer["role"] == f"leader of fleet {fleet}", answer["role"]
                hosts = {p["host"] for p in answer["status"]["proxies"]}
                assert hosts == {f"kvm-{fleet}"}, answer["status"]["proxies"]

            unnamed = proxyfleet("get", "--state-dir", short)
            assert unnamed.returncode == 1
            assert "the daemon serves several fleets (home, lab); name one with --fleet" in (
                unnamed.stderr
            )
            unknown = proxyfleet("get", "--state-dir", short, "--fleet", "office")
            assert unknown.returncode == 1 and "office" in unknown.stderr, unknown.stderr
        finally:
            daemon.stop()
        assert daemon.proc.returncode == 0, daemon.output()
        assert not list(state.glob("fleets/*/control.sock"))
