"""Soak: many daemon cycles on an idle fleet; does the daemon leak memory or descriptors?

Everything but the hypervisor is real: the fleet repo is a bare git remote on
this machine (``GitSource`` fetches it every cycle), the status goes back to it
(``GitStatusWriter``), the image comes through the real ``ImageCache`` from an
allow-listed ``file://`` directory, the HTTP listener runs, and metrics are
recorded. The one host is ``FakeHypervisor`` with the fleet's proxy already
running, so every cycle after the first is idle.

Printed: RSS and open descriptors after a warm-up and at the end, and the
growth. Goal (issue 12): RSS growth at most 5 MB, descriptors flat.

Run: ``.venv/bin/python -m benchmarks.bench_soak --cycles 1000``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from reconciler.adapters.git.gitsource import GitSource
from reconciler.adapters.git.statuswriter import GitStatusWriter
from reconciler.adapters.hypervisor.fakehost import FakeHypervisor
from reconciler.adapters.hypervisor.images.download import ImageCache
from reconciler.adapters.surface.httpapi import HttpApi
from reconciler.adapters.surface.metrics import Metrics
from reconciler.adapters.surface.notify import SdNotify
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli import compose
from reconciler.engine.daemon import Daemon, source_cycle
from reconciler.engine.parts import DaemonParts
from reconciler.engine.runtime import Runtime
from reconciler.model import Host
from reconciler.model.settings import (
    ApplySettings,
    DaemonSettings,
    GuardSettings,
    ListenSettings,
    RepoSettings,
)

WARM_UP = 20

FLEET = """\
kind: Fleet
metadata: {{name: soak}}
spec:
  images:
    debian: {{url: "{url}", sha256: {sha}}}
  machineTypes:
    small: {{vcpus: 1, memoryMiB: 512, diskGiB: 4}}
  hosts:
    - {{name: kvm-a, address: 192.0.2.1, zone: a, network: {{bridge: br0}}}}
"""

PROXY = """\
kind: Proxy
metadata: {name: web-1}
spec:
  placement: {zone: a, image: debian, machineType: small}
  cloudInit:
    userData: |
      #cloud-config
"""


def git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "soak",
        "GIT_AUTHOR_EMAIL": "soak@localhost",
        "GIT_COMMITTER_NAME": "soak",
        "GIT_COMMITTER_EMAIL": "soak@localhost",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def build(root: Path) -> tuple[Daemon, FakeHypervisor]:
    images = root / "images"
    images.mkdir()
    blob = images / "debian.qcow2"
    blob.write_bytes(b"\0" * 65536)
    sha = hashlib.sha256(blob.read_bytes()).hexdigest()
    bare, work = root / "remote.git", root / "work"
    git(root, "init", "-q", "--bare", "-b", "main", str(bare))
    git(root, "init", "-q", "-b", "main", str(work))
    (work / "fleet.yaml").write_text(FLEET.format(url=blob.as_uri(), sha=sha))
    (work / "proxy.yaml").write_text(PROXY)
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "soak fleet")
    git(work, "push", "-q", str(bare), "main")
    state = root / "state"
    repo = RepoSettings(url=f"file://{bare}")
    host = FakeHypervisor("kvm-a")
    prober = FakeProber()
    stop = threading.Event()

    def make_host(_: Host) -> FakeHypervisor:
        return host

    engine = compose.engine(
        make_host,
        images=ImageCache(state / "images", allowed_file_dirs=(images,)),
        prober=prober,
        settings=ApplySettings(ip_wait_timeout=0.0, poll_interval=0.0),
        guards=GuardSettings(
            fleet="soak", state_file=state / "deletes.json", allowed_file_dirs=(images,)
        ),
    )
    settings = DaemonSettings(repo=repo, listen=ListenSettings(port=0), state_dir=state)
    parts = DaemonParts(
        metrics=Metrics(),
        surface=lambda endpoints: HttpApi(settings.listen, endpoints),
        notifier=SdNotify({}),
        status=GitStatusWriter(repo, settings.status, state / "status"),
    )
    daemon = Daemon(
        settings,
        source_cycle(
            GitSource(repo, state / "repo"),
            lambda checkout, rev: engine.reconcile_once(checkout, revision=rev),
        ),
        parts,
        runtime=Runtime.interruptible(stop),
        handle_signals=False,
    )
    return daemon, host


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="proxyfleet-soak-") as tmp:
        daemon, host = build(Path(tmp))
        http = daemon.http
        assert http is not None  # built with its endpoint (parts.surface)
        http.start()
        try:
            started = time.monotonic()
            for n in range(1, args.cycles + 1):
                report = daemon.run_once(("soak",))
                if n == 1:
                    host.addresses_of = {d: ("10.0.0.5",) for d in host.domains}
                if n == WARM_UP:
                    base_rss, base_fds = rss_kib(), descriptors()
                    mutations = len(host.mutations)
            elapsed = time.monotonic() - started
            end_rss, end_fds = rss_kib(), descriptors()  # the listener still open, as at warm-up
        finally:
            http.stop()
        print(
            f"cycles: {args.cycles} in {elapsed:.1f} s ({elapsed / args.cycles * 1000:.0f} ms each)"
        )
        assert report is not None  # a daemon without a fleet lock always acts
        print(
            f"last result: {report.result.value}; mutating host calls after warm-up: "
            f"{len(host.mutations) - mutations}"
        )
        print(
            f"RSS after {WARM_UP} cycles: {base_rss / 1024:.1f} MiB; at the end: "
            f"{end_rss / 1024:.1f} MiB; growth {(end_rss - base_rss) / 1024:.2f} MiB (goal <= 5)"
        )
        print(f"descriptors after {WARM_UP} cycles: {base_fds}; at the end: {end_fds} (goal: flat)")


if __name__ == "__main__":
    main()
