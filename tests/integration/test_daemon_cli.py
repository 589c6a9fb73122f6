"""``proxyfleet run`` as systemd would run it: a real config, a local-path fleet
repo, a fake NOTIFY_SOCKET; commits and signals drive it, SIGTERM ends it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from daemonutil import wait_until
from gitutil import git
from hostservices import free_port

FLEET = """\
apiVersion: proxyfleet/v1
kind: Fleet
metadata:
  name: cli
spec:
  images:
    debian-12:
      url: https://images.example.test/debian-12.qcow2
      sha256: abababababababababababababababababababababababababababababababab
  machineTypes:
    small: {vcpus: 1, memoryMiB: 512, diskGiB: 4}
  hosts:
    - name: kvm01
      address: 127.0.0.1
      port: PORT
      zone: a
      network: {bridge: br0}
  policy:
    allowEmpty: true
"""


def test_proxyfleet_run_reconciles_on_commits_and_sighup_and_stops_on_sigterm(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "fleet"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "fleet.yaml").write_text(FLEET.replace("PORT", str(free_port())))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Initial fleet")
    port = free_port()
    config = tmp_path / "proxyfleet.yaml"
    config.write_text(
        f"""\
repo:
  url: {repo}
interval: 3600
listen: "127.0.0.1:{port}"
ssh:
  keyFile: {tmp_path}/no-such-key
  knownHostsFile: {tmp_path}/known_hosts
  connectTimeoutSeconds: 2
stateDir: {tmp_path}/state
"""
    )
    notify_path = tmp_path / "notify.sock"
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(notify_path))
    notify.settimeout(0.05)
    received: list[str] = []

    def notified() -> list[str]:
        while True:
            try:
                received.extend(notify.recv(4096).decode().splitlines())
            except TimeoutError:
                return received

    stderr = tmp_path / "daemon.log"
    env = {**os.environ, "NOTIFY_SOCKET": str(notify_path), "WATCHDOG_USEC": "2000000"}
    with stderr.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "reconciler", "run", "--config", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )

    def log() -> str:
        return stderr.read_text()

    try:
        assert wait_until(lambda: "READY=1" in notified(), timeout=20), log()
        assert wait_until(lambda: "Reconcile finished" in log(), timeout=60), log()
        assert wait_until(lambda: "WATCHDOG=1" in notified(), timeout=5)
        status = git(repo, "log", "--format=%an: %s", "proxyfleet-status")
        assert status.startswith("proxyfleet: Status of "), status
        assert "host kvm01 unreachable" in git(
            repo, "log", "-1", "--format=%B", "proxyfleet-status"
        )

        (repo / "web.yaml").write_text("# a comment-only file is still a commit\n")
        git(repo, "add", "-A")
        committed = time.monotonic()
        git(repo, "commit", "-q", "-m", "Touch")
        assert wait_until(lambda: "Reconcile started (commit)" in log(), timeout=2.0), log()
        print(f"commit -> reconcile start: {time.monotonic() - committed:.2f} s")
        assert wait_until(lambda: log().count("Reconcile finished") == 2, timeout=60), log()

        proc.send_signal(signal.SIGHUP)
        assert wait_until(lambda: "Reconcile started (SIGHUP)" in log(), timeout=5), log()
        assert wait_until(lambda: log().count("Reconcile finished") == 3, timeout=60), log()
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        assert b'proxyfleet_host_up{host="kvm01",zone="a"} 0.0' in metrics
        assert len(git(repo, "log", "--format=%h", "proxyfleet-status").splitlines()) == 2

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, log()
        assert "STOPPING=1" in notified()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        notify.close()
