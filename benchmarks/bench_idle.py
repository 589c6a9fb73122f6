"""Row 1: an idle reconcile of one lab host holding 200 owned VMs and 20 foreign ones.

The 200 owned domains are defined (never started) directly through libvirt
with proxyfleet's own domain XML and ownership metadata, for a generated
fleet of 200 proxies, so that they are owned and up to date; the 20 foreign
domains carry no metadata. The fleet says ``drift: detect``, so shut-off VMs
are kept and the plan holds nothing to do.

Measured, on one connection kept open across runs (the daemon keeps its own):

- proxyfleet: ``observe`` + ``plan`` wall time, and every libvirt RPC it made,
  counted through the RPC observer hook of the host adapter; mutating RPCs
  must be 0 (printed, not asserted);
- the floor: a minimal libvirt-python loop over the same forwarded socket
  (the same libvirt connection): list all domains, read each one's metadata.

Run: ``PROXYFLEET_LAB_INSTANCE=2 .venv/bin/python -m benchmarks.bench_idle``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import libvirt

from benchmarks.common import (
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
from benchmarks.specs import vm_specs
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.core.plan.planner import plan
from reconciler.core.render.domainxml import domain_xml
from reconciler.core.render.metadata import NAMESPACE
from reconciler.engine.observe import observe
from reconciler.model import Repo

FLEET = "idle"
FOREIGN_PREFIX = "foreign-idle-"


def write_repo(root: Path, proxies: int) -> Repo:
    root.mkdir(parents=True, exist_ok=True)
    (root / "fleet.yaml").write_text(
        fleet_yaml(FLEET, policy="prune: true\n    maxDeletesPerRun: 5\n    drift: detect")
    )
    (root / "proxies.yaml").write_text(
        "---\n".join(proxy_yaml(f"idle-{i:03d}") for i in range(proxies))
    )
    return load_repo_at(root)


def owned_xml(repo: Repo, host_name: str | None = None) -> dict[str, str]:
    """Domain XML (with the ownership element) of every proxy, by domain name: of those
    pinned to ``host_name`` (``placement.host``), or of all on the fleet's first host."""
    pool_dir = "/var/lib/libvirt/images"
    return {
        spec.domain: domain_xml(
            spec,
            disk_path=f"{pool_dir}/{spec.overlay_name}",
            seed_path=f"{pool_dir}/{spec.seed_name}",
        )
        for spec in vm_specs(repo, host_name)
    }


def foreign_xml(name: str) -> str:
    return (
        f"<domain type='qemu'><name>{name}</name><memory unit='MiB'>128</memory>"
        "<os><type arch='x86_64'>hvm</type></os></domain>"
    )


def populate(
    conn: Any, wanted: dict[str, str], ours: tuple[str, ...] = (f"pf-{FLEET}-", FOREIGN_PREFIX)
) -> None:
    """Define exactly ``wanted`` among the bench domains (names starting with ``ours``)."""
    existing = {d.name(): d for d in conn.listAllDomains(0)}
    for name, dom in existing.items():
        if name.startswith(ours) and name not in wanted:
            dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
    started = time.monotonic()
    made = 0
    for name, xml in wanted.items():
        if name not in existing:
            conn.defineXML(xml)
            made += 1
    print(f"defined {made} domains in {time.monotonic() - started:.1f} s", flush=True)


def minimal_loop(conn: Any) -> tuple[int, int]:
    """The floor: list all domains and read each one's metadata. (domains, owned)."""
    owned = 0
    domains = conn.listAllDomains(0)
    for dom in domains:
        try:
            dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NAMESPACE, 0)
        except libvirt.libvirtError:
            continue
        owned += 1
    return len(domains), owned


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proxies", type=int, default=200)
    parser.add_argument("--foreign", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--keep", action="store_true", help="leave the domains defined")
    add_watch_argument(parser)
    parser.add_argument("--json", help="write the result here (for benchmarks.run)")
    args = parser.parse_args()

    result = Result(row="idle", load_before=os.getloadavg(), busy=busy_text())
    lab = lab_up()
    repo = write_repo(bench_dir("idle") / "repo", args.proxies)
    counter = RpcCounter()
    hv = LibvirtHost(repo.fleet.hosts[0], lab_ssh(lab), observer=counter, watch=args.watch)
    conn = hv.session.connection()
    wanted = owned_xml(repo)
    wanted.update(
        {f"{FOREIGN_PREFIX}{i:02d}": foreign_xml(f"{FOREIGN_PREFIX}{i:02d}") for i in range(20)}
    )
    populate(conn, wanted)
    counter.take()
    hosts = {hv.name: hv}
    summaries: list[dict[str, int]] = []
    rpc_kinds: Counter[str] = Counter()
    calls: list[int] = []
    muts: list[int] = []

    cold: list[float] = []

    def proxyfleet() -> float:
        began = time.perf_counter()
        seen = observe(repo.fleet, hosts, timeout=120)
        summaries.append(plan(repo, seen.inventory).summary())
        seconds = time.perf_counter() - began
        if not cold:  # the warm-up: the daemon's first cycle
            cold.append(seconds)
        taken = counter.take()
        calls.append(sum(taken.values()))
        muts.append(mutating(taken))
        if len(calls) == 2:  # the first measured run (the warm-up is the cold cycle)
            rpc_kinds.update(taken)
        return seconds

    floor_counts: list[tuple[int, int]] = []
    try:
        timed = alternate(
            {
                "proxyfleet observe+plan": proxyfleet,
                "minimal libvirt loop": lambda: floor_counts.append(minimal_loop(conn)),
            },
            runs=args.runs,
        )
        pf, floor = timed["proxyfleet observe+plan"], timed["minimal libvirt loop"]
    finally:
        if not args.keep:
            populate(conn, {})
        hv.close()
    domains, owned = floor_counts[-1]
    result.add("proxyfleet", "s", pf)
    result.add("floor", "s", floor)
    result.add("rpcs", "RPCs", calls[1:])
    result.add("floor_rpcs", "RPCs", [1 + domains])
    result.add("mutating", "RPCs", muts[1:])
    plan_text = ", ".join(f"{k} {v}" for k, v in summaries[-1].items() if v)
    kinds = ", ".join(f"{n} {rpc}" for rpc, n in rpc_kinds.items())
    result.add("cold", "s", cold)
    result.note(f"plan: {plan_text}; proxyfleet's RPCs per observe: {kinds}")
    result.note(watch_note(args.watch, cold[0], calls[0]))
    result.note(f"the minimal loop saw {domains} domains, {owned} with proxyfleet metadata")
    result.note(
        f"proxyfleet {result.metrics['proxyfleet'].text(3)}, minimal loop "
        f"{result.metrics['floor'].text(3)}: ratio "
        f"{result.metrics['proxyfleet'].median / result.metrics['floor'].median:.2f}x"
    )
    result.note(f"mutating RPCs during the idle reconciles: {max(muts)} (must be 0)")
    refreshes = rpc_kinds.get("virStoragePoolRefresh", 0)
    result.note(f"pool refreshes per observe (a rescan, not a change): {refreshes}")
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
