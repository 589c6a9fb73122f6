"""Row 4: from a commit to the first create RPC on the lab host, by webhook and by file watch.

``proxyfleet run`` runs as a process of its own with ``-v`` against one lab
host; its fleet repo holds no proxy yet. A run commits one proxy and
measures from the moment the commit exists to the start of the first
libvirt call of its create (the overlay's ``virStorageVolCreateXML``), read
from the daemon's trace: each line says when the call ended and how long it
took. The moment the new VM's ``virDomainCreate`` returned is kept too.

- file watch: ``repo.url`` is the repo's path; the watcher sees the branch's
  ref change.
- webhook: ``repo.url`` is a name git rewrites to that path
  (``url.<path>.insteadOf``, through ``GIT_CONFIG_GLOBAL``), so the daemon
  treats it as remote and watches nothing, as with a forge; the benchmark
  posts a signed ``/hook`` right after the commit, as the forge would.

After each run the daemon is stopped (SIGTERM: it is waiting for the new VM's
IP by then), the VM deleted and the commit reverted, and the next run starts
a fresh daemon that has finished its startup reconcile before the commit.

Run: ``PROXYFLEET_LAB_INSTANCE=2 .venv/bin/python -m benchmarks.bench_trigger``.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.common import (
    ROOT,
    Result,
    bench_dir,
    busy_text,
    emit,
    fleet_yaml,
    fresh_dir,
    git,
    lab_host,
    lab_ssh,
    lab_up,
    proxy_yaml,
)
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.adapters.surface.httpapi import SIGNATURE_HEADER, sign

FLEET = "tr"
RPC_LINE = re.compile(r'^time=(\S+) .*msg="rpc=(\w+) .*duration_ms=([\d.]+)')
FINISHED = "Reconcile finished"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the benchmark that started it dies, however
    (a benchmark killed mid-run once left its daemon reconciling the lab for an hour)."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


class Daemon:
    """``proxyfleet -v run`` with its log in a file, started and stopped per run."""

    def __init__(self, config: Path, log: Path, env: dict[str, str]) -> None:
        self.log = log
        self.handle = log.open("w")
        self.proc = subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "proxyfleet"), "-v", "run", "--config", str(config)],
            stdout=self.handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
            preexec_fn=die_with_parent,
        )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, *, count: int = 1, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while self.text().count(needle) < count:
            if self.proc.poll() is not None:
                raise SystemExit(f"the daemon exited:\n{self.text()[-3000:]}")
            if time.monotonic() > deadline:
                raise SystemExit(f"no {needle!r} within {timeout} s:\n{self.text()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.handle.close()


def daemon_config(
    path: Path, *, url: str, lab: dict[str, Any], port: int, state: Path, extra: str = ""
) -> Path:
    """A bench daemon's config at ``path`` (repo ``url``, the lab's key, ``-v``-ready log,
    no status branch, ``extra`` settings), with ``state`` emptied but for its image cache:
    the repo is new each bench, and a checkout of the last one would make its head a
    non-fast-forward, which the daemon refuses."""
    path.write_text(
        f"repo:\n  url: '{url}'\n  branch: main\n"
        "interval: 3600\njitter: 0\n"
        f"ssh:\n  keyFile: {lab['sshKey']}\n  knownHostsFile: {lab['knownHosts']}\n"
        f"listen: 127.0.0.1:{port}\n" + extra + "status:\n  enabled: false\n"
        "log:\n  level: debug\n"
        f"stateDir: {state}\n"
    )
    state.mkdir(parents=True, exist_ok=True)
    for entry in state.iterdir():
        if entry.name != "images":
            if entry.is_dir():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    return path


def rpc_starts(text: str, rpc: str) -> list[float]:
    """Epoch seconds at which each ``rpc`` call of the trace started."""
    starts = []
    for line in text.splitlines():
        match = RPC_LINE.match(line)
        if match and match.group(2) == rpc:
            ended = datetime.fromisoformat(match.group(1).replace("Z", "+00:00")).timestamp()
            starts.append(ended - float(match.group(3)) / 1000)
    return starts


def rpc_ends(text: str, rpc: str) -> list[float]:
    ends = []
    for line in text.splitlines():
        match = RPC_LINE.match(line)
        if match and match.group(2) == rpc:
            ends.append(datetime.fromisoformat(match.group(1).replace("Z", "+00:00")).timestamp())
    return ends


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", help="write the result here (for benchmarks.run)")
    args = parser.parse_args()

    result = Result(row="trigger", load_before=os.getloadavg(), busy=busy_text())
    lab = lab_up()
    work = fresh_dir("trigger")
    repo = work / "fleet"
    repo.mkdir()
    (repo / "fleet.yaml").write_text(fleet_yaml(FLEET))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "no proxies yet")
    secret = secrets.token_hex(16).encode()
    (work / "hook-secret").write_bytes(secret)
    gitconfig = work / "gitconfig"
    gitconfig.write_text(f'[url "{repo}"]\n\tinsteadOf = bench-forge:\n')
    env = {**os.environ, "GIT_CONFIG_GLOBAL": str(gitconfig)}
    hv = LibvirtHost(lab_host(lab), lab_ssh(lab))
    state = bench_dir("trigger-state")  # kept: the warm-up run fetches the image once

    def config(kind: str, port: int) -> Path:
        url = str(repo) if kind == "watch" else "bench-forge:"
        return daemon_config(
            work / f"{kind}.yaml",
            url=url,
            lab=lab,
            port=port,
            state=state / kind,
            extra=f"webhook:\n  secretFile: {work / 'hook-secret'}\n",
        )

    def clean() -> None:
        for d in hv.observe().domains:
            if d.name.startswith(f"pf-{FLEET}-"):
                hv.delete(d.name)

    def one(kind: str, index: int) -> tuple[float, float]:
        port = free_port()
        daemon = Daemon(config(kind, port), work / f"{kind}-{index}.log", env)
        try:
            daemon.wait_for(FINISHED)
            time.sleep(0.5)  # idle: the watcher armed, the loop waiting
            name = f"{FLEET}-new-{index}"
            (repo / f"{name}.yaml").write_text(proxy_yaml(name))
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", f"add {name}")
            committed = time.time()
            if kind == "webhook":
                body = b'{"ref": "refs/heads/main"}'
                request = urllib.request.Request(
                    f"http://127.0.0.1:{port}/hook",
                    data=body,
                    headers={SIGNATURE_HEADER: sign(secret, body)},
                    method="POST",
                )
                with urllib.request.urlopen(request, timeout=10) as answer:
                    answer.read()
            daemon.wait_for("rpc=virDomainCreate ", timeout=600)
            text = daemon.text()
        finally:
            daemon.stop()
        first = [t for t in rpc_starts(text, "virStorageVolCreateXML") if t >= committed]
        started = [t for t in rpc_ends(text, "virDomainCreate") if t >= committed]
        git(repo, "rm", "-q", f"{name}.yaml")
        git(repo, "commit", "-q", "-m", f"remove {name}")
        clean()
        return first[0] - committed, started[0] - committed

    results: dict[str, Any] = {}
    try:
        clean()
        for kind in ("webhook", "watch"):
            firsts, starts = [], []
            for index in range(args.runs + 1):
                first, start = one(kind, index)
                label = "warm-up" if index == 0 else f"run {index}/{args.runs}"
                print(
                    f"  {kind} {label}: first create RPC after {first:.3f} s, "
                    f"VM started after {start:.3f} s",
                    flush=True,
                )
                if index:
                    firsts.append(first)
                    starts.append(start)
            results[kind] = (firsts, starts)
    finally:
        clean()
        hv.close()
    hook = result.add("webhook", "s", results["webhook"][0])
    watch = result.add("watch", "s", results["watch"][0])
    result.add("webhook_started", "s", results["webhook"][1])
    result.add("watch_started", "s", results["watch"][1])
    result.note(f"commit -> first create RPC: webhook {hook.text(3)}, file watch {watch.text(3)}")
    result.note(
        "commit -> new VM started (virDomainCreate returned): "
        f"webhook {result.metrics['webhook_started'].text(2)}, "
        f"file watch {result.metrics['watch_started'].text(2)}"
    )
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
