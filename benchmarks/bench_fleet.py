"""Row 7: the whole fleet idle: 10 lab hosts holding 200 owned VMs each, observed at once.

The lab brings up 10 light hosts (``lab up --hosts 10 --light``: libvirtd, virtlogd and
sshd each, no guest running). A generated fleet of 2,000 proxies pins 200 to each host
(``placement.host``); a child process defines their domains (never started) directly
through libvirt with proxyfleet's own domain XML and ownership metadata, as row 1 does
for one host, so that they are owned and up to date. The fleet says ``drift: detect``,
so the plan is 2,000 keeps.

Measured, on one connection per host kept open across runs (the daemon keeps its own):

- proxyfleet: ``observe`` of the whole fleet (every host read on a thread of its own,
  as the engine does) + ``plan``: wall time, every libvirt RPC (counted through the
  RPC observer hook of the host adapter; mutating ones must be 0, printed, not
  asserted), and the peak RSS of this process (VmHWM; the domains are defined by a
  child process, so their XML never lived here);
- the floor: the minimal libvirt-python loop of row 1 (list all domains, read each
  one's metadata) on each host in turn over the same connections; the floor of a run
  is its slowest host, the least any tool reading the hosts at once must wait for.

Run: ``PROXYFLEET_LAB_INSTANCE=6 .venv/bin/python -m benchmarks.bench_fleet``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from benchmarks.bench_idle import minimal_loop, owned_xml, populate
from benchmarks.common import (
    ROOT,
    Result,
    RpcCounter,
    add_watch_argument,
    alternate,
    bench_dir,
    busy_text,
    emit,
    fleet_yaml,
    lab_ssh,
    lab_up,
    mutating,
    proxy_yaml,
    watch_note,
)
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.core.plan.planner import plan
from reconciler.engine.observe import observe
from reconciler.model import Repo
from reconciler.model.settings import LIBVIRT_TRANSPORTS, SshSettings
from reconciler.ports.hypervisor import Hypervisor

FLEET = "fleet"
OURS = (f"pf-{FLEET}-",)


def write_repo(root: Path, per_host: int) -> Repo:
    """fleet.yaml over every lab host, each in a zone of its own (``h<NN>``), and a ProxySet
    of ``per_host`` proxies in each zone (``f<NN>-<ordinal>``): 200 proxies on each host,
    written as an operator writes a fleet this size (2,000 Proxy documents would be over
    one load's bound on YAML values, reconciler.core.load.expansion)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "proxies.yaml").unlink(missing_ok=True)  # an earlier run's: fleet.yaml alone first
    policy = "prune: true\n    maxDeletesPerRun: 5\n    drift: detect"
    (root / "fleet.yaml").write_text(fleet_yaml(FLEET, policy=policy, zone_per_host=True))
    fleet = load_repo_at(root).fleet
    (root / "proxies.yaml").write_text(
        "---\n".join(
            proxy_yaml(f"f{h:02d}", zone=host.zone, replicas=per_host)
            for h, host in enumerate(fleet.hosts)
        )
    )
    return load_repo_at(root)


def rss_kib(field: str) -> int:
    """``VmHWM`` (peak) or ``VmRSS`` (now) of this process, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def children_rss_kib() -> tuple[int, int]:
    """(count, summed VmRSS in KiB) of this process's direct children: the ``ssh`` forwards
    of ``ssh.libvirtTransport: openssh``."""
    count = total = 0
    me = str(os.getpid())
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            status = (proc / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if fields.get("PPid", "").strip() == me and "VmRSS" in fields:
            count += 1
            total += int(fields["VmRSS"].split()[0])
    return count, total


def define_all(repo: Repo, hvs: dict[str, LibvirtHost], *, clean: bool) -> None:
    """Every host holds exactly its pinned proxies' domains (none with ``clean``), the hosts
    populated at once."""

    def one(name: str) -> None:
        wanted = {} if clean else owned_xml(repo, name)
        populate(hvs[name].session.connection(), wanted, OURS)

    with ThreadPoolExecutor(len(hvs)) as pool:
        list(pool.map(one, hvs))  # re-raises the first host's failure


def child_populate(repo_dir: Path, *, clean: bool) -> None:
    """``define_all`` in a process of its own, so that the measuring process's peak RSS
    never held 2,000 domain XMLs."""
    subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.bench_fleet",
            "--populate-only",
            "--repo",
            str(repo_dir),
            *(["--clean-only"] if clean else []),
        ],
        cwd=ROOT,
        check=True,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--per-host", type=int, default=200)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="leave the domains defined")
    parser.add_argument(
        "--transport",
        choices=LIBVIRT_TRANSPORTS,
        default=SshSettings().libvirt_transport,
        help="ssh.libvirtTransport of proxyfleet's connections (and the floor's, the same ones)",
    )
    add_watch_argument(parser)
    parser.add_argument("--json", help="write the result here (for benchmarks.run)")
    parser.add_argument("--populate-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--clean-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repo", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.populate_only:
        # The parent brought the lab up; lab.json names its key and known_hosts.
        from lab import config

        repo = load_repo_at(Path(args.repo))
        lab_json = json.loads((config.STATE / "lab.json").read_text())
        hvs = {h.name: LibvirtHost(h, lab_ssh(lab_json)) for h in repo.fleet.hosts}
        try:
            define_all(repo, hvs, clean=args.clean_only)
        finally:
            for hv in hvs.values():
                hv.close()
        return 0

    result = Result(row="fleet", load_before=os.getloadavg(), busy=busy_text())
    started = time.monotonic()
    lab = lab_up(args.hosts, light=True)
    print(f"lab up: {len(lab['hosts'])} hosts [{time.monotonic() - started:.1f} s]", flush=True)
    repo_dir = bench_dir("fleet") / "repo"
    repo = write_repo(repo_dir, args.per_host)
    child_populate(repo_dir, clean=False)
    counter = RpcCounter()
    ssh = replace(lab_ssh(lab), libvirt_transport=args.transport)
    hvs = {
        h.name: LibvirtHost(h, ssh, observer=counter, watch=args.watch) for h in repo.fleet.hosts
    }
    hypervisors: dict[str, Hypervisor] = dict(hvs)
    conns = {name: hv.session.connection() for name, hv in hvs.items()}
    counter.take()
    rss_before = rss_kib("VmRSS")
    summaries: list[dict[str, int]] = []
    rpc_kinds: Counter[str] = Counter()
    calls: list[int] = []
    muts: list[int] = []
    unreachable: list[int] = []
    slowest: list[tuple[float, str]] = []
    floor_counts: list[int] = []

    cold: list[float] = []

    def proxyfleet() -> float:
        began = time.perf_counter()
        seen = observe(repo.fleet, hypervisors, timeout=120)
        summaries.append(plan(repo, seen.inventory).summary())
        seconds = time.perf_counter() - began
        if not cold:  # the warm-up: the daemon's first cycle
            cold.append(seconds)
        unreachable.append(sum(not h.reachable for h in seen.inventory.hosts))
        taken = counter.take()
        calls.append(sum(taken.values()))
        muts.append(mutating(taken))
        if len(calls) == 2:  # the first measured run (the warm-up is the cold cycle)
            rpc_kinds.update(taken)
        return seconds

    def floor() -> float:
        times = {}
        seen = 0
        for name, conn in conns.items():
            began = time.perf_counter()
            domains, _ = minimal_loop(conn)
            times[name] = time.perf_counter() - began
            seen += domains
        floor_counts.append(seen)
        name = max(times, key=lambda n: times[n])
        slowest.append((times[name], name))
        return times[name]

    def together() -> None:
        """Every host's loop at once, a thread each: what this machine's cores allow."""
        threads = [threading.Thread(target=minimal_loop, args=(conn,)) for conn in conns.values()]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    try:
        timed = alternate(
            {
                "proxyfleet observe+plan, whole fleet": proxyfleet,
                "slowest host's loop": floor,
                "every host's loop at once": together,
            },
            runs=args.runs,
        )
        peak = rss_kib("VmHWM")
        children, children_kib = children_rss_kib()
        via = ", ".join(sorted({hv.session.via for hv in hvs.values()}))
    finally:
        for hv in hvs.values():
            hv.close()
        if not args.keep:
            child_populate(repo_dir, clean=True)
    pf = result.add("proxyfleet", "s", timed["proxyfleet observe+plan, whole fleet"])
    fl = result.add("floor", "s", timed["slowest host's loop"])
    at_once = result.add("together", "s", timed["every host's loop at once"])
    result.add("rpcs", "RPCs", calls[1:])
    result.add("mutating", "RPCs", muts[1:])
    result.add("rss", "MiB", [peak / 1024])
    result.add("hosts", "hosts", [len(hvs)])
    result.add("domains", "domains", [floor_counts[-1]])
    plan_text = ", ".join(f"{k} {v}" for k, v in summaries[-1].items() if v)
    kinds = ", ".join(f"{n} {rpc}" for rpc, n in rpc_kinds.most_common())
    result.note(
        f"ssh.libvirtTransport {args.transport} (libvirt over {via}); "
        f"{len(hvs)} hosts, {floor_counts[-1]} domains; plan: {plan_text}; unreachable hosts: "
        f"{max(unreachable)}; proxyfleet's RPCs per observe: {kinds}"
    )
    result.add("cold", "s", cold)
    result.note(watch_note(args.watch, cold[0], calls[0]))
    hosts_slowest = Counter(name for _, name in slowest[1:])
    result.note(
        f"proxyfleet {pf.text(3)}, slowest host's minimal loop {fl.text(3)} (slowest: "
        + ", ".join(f"{name} {n}x" for name, n in hosts_slowest.most_common())
        + f"): ratio {pf.median / fl.median:.2f}x; every host's loop at once (a thread each, "
        f"all on this machine's {os.cpu_count()} cores) {at_once.text(3)}: "
        f"ratio {pf.median / at_once.median:.2f}x"
    )
    result.note(f"mutating RPCs during the idle reconciles: {max(muts)} (must be 0)")
    result.note(
        f"peak RSS of the measuring process (proxyfleet's side; its floor loops add little): "
        f"{peak / 1024:.0f} MiB ({peak * 1024 / 1e6:.0f} MB; {rss_before / 1024:.0f} MiB after "
        "loading the repo and dialling the hosts, before the first observe)"
        + (
            f"; its {children} ssh children hold {children_kib / 1024:.0f} MiB more"
            if children
            else ""
        )
    )
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
