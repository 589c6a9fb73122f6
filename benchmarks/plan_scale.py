"""How long one plan takes for a large fleet: 5,000 proxies, 100 hosts, 20 zones, 10% drift.

Run: ``make bench`` or ``.venv/bin/python benchmarks/plan_scale.py``. Prints
figures; asserts nothing (targets: under 1 s and under 200 MB peak RSS). One
warm-up plan, then ``--runs`` timed ones; ``--json FILE`` hands the figures
to ``benchmarks.run``.

The drift (10% of proxies, picked with a fixed seed) is split evenly between
a changed spec (replace), a missing VM (create), a shut-off VM (start) and a
VM whose manifest is gone (delete); maxDeletesPerRun 10 blocks most deletes
and replaces; 5% of hosts are unreachable; every host also runs two foreign
domains.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

from reconciler.core.naming import domain_name, resolve_image
from reconciler.core.plan.digest import Digests, proxy_digest
from reconciler.core.plan.planner import plan
from reconciler.model import (
    CloudInit,
    Domain,
    DomainState,
    Fleet,
    Host,
    HostInventory,
    HostNetwork,
    Image,
    Inventory,
    MachineType,
    Owner,
    Placement,
    Policy,
    Proxy,
    Repo,
)


def build(proxies: int, hosts: int, zones: int, drift: float) -> tuple[Repo, Inventory]:
    rng = random.Random(20261130)
    host_list = tuple(
        Host(
            name=f"kvm{i:03d}",
            address=f"10.0.{i // 250}.{i % 250 + 1}",
            zone=f"zone{i % zones:02d}",
            network=HostNetwork("bridge", "br0" if i % 2 else "br1"),
            max_proxies=proxies // hosts * 2,
        )
        for i in range(hosts)
    )
    fleet = Fleet(
        name="bench",
        images=(Image(key="debian", url="https://images.example/debian.qcow2", sha256="a" * 64),),
        machine_types=(MachineType(key="small", vcpus=1, memory_mib=1024, disk_gib=10),),
        hosts=host_list,
        policy=Policy(prune=True, max_deletes_per_run=10),
    )
    proxy_list = tuple(
        Proxy(
            name=f"proxy-{i:05d}",
            placement=Placement(zone=f"zone{i % zones:02d}", image="debian", machine_type="small"),
            cloud_init=CloudInit(user_data=f"#cloud-config\nhostname: proxy-{i:05d}\n"),
        )
        for i in range(proxies)
    )
    repo = Repo(fleet=fleet, proxies=proxy_list)
    by_zone: dict[str, list[Host]] = {}
    for host in host_list:
        by_zone.setdefault(host.zone, []).append(host)
    domains: dict[str, list[Domain]] = {h.name: [] for h in host_list}
    drifted = set(rng.sample(range(proxies), int(proxies * drift)))
    for i, proxy in enumerate(proxy_list):
        zone_hosts = by_zone[proxy.placement.zone]
        host = zone_hosts[(i // zones) % len(zone_hosts)]
        image = resolve_image(fleet, proxy.placement.image)
        machine = fleet.machine_type(proxy.placement.machine_type)
        assert image is not None and machine is not None
        digest = proxy_digest(proxy, host, image=image, machine_type=machine)
        kind = i % 4 if i in drifted else -1
        if kind == 0:
            digest = f"{i:064x}"  # changed spec: replace
        if kind == 1:
            continue  # missing VM: create
        name = proxy.name if kind != 3 else f"retired-{i:05d}"  # 3: manifest gone
        state = DomainState.SHUTOFF if kind == 2 else DomainState.RUNNING
        owner = Owner(fleet=fleet.name, proxy=name, digest=digest)
        domains[host.name].append(Domain(domain_name(fleet.name, name, digest), state, owner))
    unreachable = set(rng.sample([h.name for h in host_list], max(1, hosts // 20)))
    inventory = Inventory(
        hosts=tuple(
            HostInventory(name=h.name, reachable=False, error="timeout")
            if h.name in unreachable
            else HostInventory(
                name=h.name,
                reachable=True,
                domains=(
                    *domains[h.name],
                    Domain("windows11", DomainState.RUNNING),
                    Domain("backup", DomainState.SHUTOFF),
                ),
            )
            for h in host_list
        )
    )
    return repo, inventory


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proxies", type=int, default=5000)
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--zones", type=int, default=20)
    parser.add_argument("--drift", type=float, default=0.10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", help="write the figures here (for benchmarks.run)")
    args = parser.parse_args()
    load_before = os.getloadavg()

    repo, inventory = build(args.proxies, args.hosts, args.zones, args.drift)
    domains = sum(len(h.domains) for h in inventory.hosts)
    print(
        f"world: {len(repo.proxies)} proxies, {len(repo.fleet.hosts)} hosts, "
        f"{args.zones} zones, {domains} domains observed, {args.drift:.0%} drift"
    )
    timings = []
    result = None
    memo = Digests()  # kept across plans, as the daemon's engine keeps it
    for _ in range(args.runs + 1):  # the first is the warm-up (it fills the memo)
        started = time.perf_counter()
        result = plan(repo, inventory, memo=memo)
        timings.append(time.perf_counter() - started)
    assert result is not None
    print("plan:", ", ".join(f"{k} {v}" for k, v in result.summary().items()))
    print(
        f"wall time per plan: warm-up {timings[0] * 1000:.0f} ms, "
        f"median {statistics.median(timings[1:]) * 1000:.0f} ms over {args.runs} runs "
        f"(min {min(timings[1:]) * 1000:.0f}, max {max(timings[1:]) * 1000:.0f})"
    )
    tracemalloc.start()
    plan(repo, inventory, memo=memo)
    _, plan_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(f"peak RSS of the process: {peak_rss_kib / 1024:.0f} MiB")
    print(f"peak Python allocation during one plan: {plan_peak / 2**20:.1f} MiB")
    if args.json:
        metric = {"unit": "", "samples": []}
        figures = {
            "row": "plan",
            "metrics": {
                "proxyfleet": {**metric, "name": "proxyfleet", "unit": "s", "samples": timings[1:]},
                "rss": {**metric, "name": "rss", "unit": "MiB", "samples": [peak_rss_kib / 1024]},
            },
            "notes": [
                f"{len(repo.proxies)} proxies, {len(repo.fleet.hosts)} hosts, {domains} domains: "
                + ", ".join(f"{k} {v}" for k, v in result.summary().items() if v),
                f"peak Python allocation during one plan: {plan_peak / 2**20:.1f} MiB",
            ],
            "load_before": load_before,
            "load_after": os.getloadavg(),
            "busy": "",
        }
        Path(args.json).write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
