"""Row 2: creating 20 proxy VMs (define + start, boot not awaited), proxyfleet against kcli.

Both sides create the same 20 VMs on the same lab host from the same base
image already in its pool: 1 vCPU, 256 MiB, a 3 GiB qcow2 overlay on
``base-debian12-bios-<sha256[:12]>.qcow2``, a cloud-init seed ISO with a small cloud-config,
one NIC on the host's bridge ``br0``, BIOS, TCG.

- proxyfleet: ``proxyfleet apply --yes --no-wait --json`` on a fleet repo of
  20 proxies (load, SSH dial, observe, plan, image check, 20 creates four at
  a time, the default ``concurrency.perHost``, one look at each new VM), the
  whole command timed; ``--wider N`` also times it with ``perHost: N``;
- kcli (``pip install kcli`` in ``.bench-venv``, never the project's venv):
  ``kcli create vm -c 20`` over ``qemu+ssh`` with the lab's key and
  known_hosts, the whole command timed. kcli only finds bridges that libvirt's
  interface driver reports active, and a bridge without a running guest is
  inactive, so kcli gets a libvirt network in bridge mode over ``br0``
  (``kcli-br0``): the same tap on the same bridge.

The warm-up run uploads the base image (proxyfleet) and lets kcli see it;
every run's VMs are destroyed and deleted with their volumes right after it,
so no guest keeps running.

Run: ``PROXYFLEET_LAB_INSTANCE=2 .venv/bin/python -m benchmarks.bench_create``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import libvirt

from benchmarks.common import (
    BENCH_VENV,
    Result,
    alternate,
    apply_cmd,
    apply_config,
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
from benchmarks.floors import PREFIX as FLOOR_PREFIX
from benchmarks.floors import FloorVm, create_all, floor_name, floor_vms
from benchmarks.specs import vm_specs
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.model import Image
from reconciler.model.settings import ApplySettings
from reconciler.model.vm import VmSpec, base_volume_name

FLEET = "cr"
IMAGE_KEY = "debian12-bios"


def base_name(lab: dict[str, Any]) -> str:
    """The base volume proxyfleet uploads for the lab image (named by its content)."""
    return base_volume_name(Image(key=IMAGE_KEY, url="", sha256=lab["image"]["sha256"]))


KCLI_NET = "kcli-br0"
KCLI_PREFIX = "kc"
OTHERS = (f"{KCLI_PREFIX}-", FLOOR_PREFIX)
"""Domains and volumes of the baselines (kcli's, the floor's)."""
USER_DATA_CMD = "echo bench > /run/bench"


def kcli_bin() -> Path:
    return BENCH_VENV / "bin" / "kcli"


def kcli_create_cmd(lab: dict[str, Any], count: int, prefix: str = KCLI_PREFIX) -> list[str]:
    """``kcli create vm -c <count>``: VMs ``<prefix>-0`` ... like proxyfleet's (module doc)."""
    return [
        str(kcli_bin()),
        "create",
        "vm",
        "-c",
        str(count),
        "-i",
        base_name(lab),
        "-P",
        "memory=256",
        "-P",
        "numcpus=1",
        "-P",
        "disks=[3]",
        "-P",
        f"nets=[{KCLI_NET}]",
        "-P",
        "virttype=qemu",
        "-P",
        "cpumodel=qemu64",
        "-P",
        f"cmds=['{USER_DATA_CMD}']",
        prefix,
    ]


def kcli_home(lab: dict[str, Any], address: str) -> Path:
    """A HOME of kcli's own: its config, the lab key, ssh's config with the lab's known_hosts."""
    home = bench_dir("kcli-home")
    (home / ".kcli").mkdir(exist_ok=True)
    (home / ".ssh").mkdir(exist_ok=True)
    key = home / ".kcli" / "id_ed25519"
    key.write_bytes(Path(lab["sshKey"]).read_bytes())
    key.chmod(0o600)
    public = subprocess.run(
        ["ssh-keygen", "-y", "-f", str(key)], capture_output=True, text=True, check=True
    ).stdout
    (home / ".kcli" / "id_ed25519.pub").write_text(public)
    (home / ".ssh" / "config").write_text(
        f"Host {address}\n  User root\n  IdentityFile {key}\n"
        f"  UserKnownHostsFile {lab['knownHosts']}\n  StrictHostKeyChecking yes\n"
    )
    (home / ".kcli" / "config.yml").write_text(
        "default:\n  client: lab\n"
        f"lab:\n  type: kvm\n  host: {address}\n  user: root\n  protocol: ssh\n  pool: default\n"
    )
    return home


def write_repo(count: int) -> Path:
    root = fresh_dir("create") / "repo"
    root.mkdir()
    (root / "fleet.yaml").write_text(fleet_yaml(FLEET))
    for i in range(count):
        (root / f"{FLEET}-{i:02d}.yaml").write_text(proxy_yaml(f"{FLEET}-{i:02d}", image=IMAGE_KEY))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "20 proxies")
    return root


def ensure_bridge_network(conn: Any) -> None:
    try:
        net = conn.networkLookupByName(KCLI_NET)
    except libvirt.libvirtError:
        net = None
    if net is not None and net.isActive():
        return
    xml = f"<network><name>{KCLI_NET}</name><forward mode='bridge'/><bridge name='br0'/></network>"
    conn.networkCreateXML(xml)  # transient: gone with the lab host's libvirtd


def remove_vms(hv: LibvirtHost, conn: Any, fleet: str = FLEET) -> int:
    """Destroy and delete every VM of this benchmark (proxyfleet's of ``fleet``, kcli's,
    the floor's) with its volumes."""
    removed = 0
    for dom in conn.listAllDomains(0):
        name = dom.name()
        if name.startswith(f"pf-{fleet}-"):
            hv.delete(name)
            removed += 1
        elif name.startswith(OTHERS):
            if dom.isActive():
                dom.destroy()
            dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
            removed += 1
    pool = conn.storagePoolLookupByName("default")
    pool.refresh(0)
    for vol in pool.listAllVolumes(0):
        if vol.name().startswith(OTHERS):
            vol.delete(0)
    return removed


WIDTH = ApplySettings().per_host_concurrency
"""The floor's VMs at a time: proxyfleet's default ``concurrency.perHost``."""


def rendered(conn: Any, lab: dict[str, Any], specs: list[VmSpec]) -> list[FloorVm]:
    """The floor's VMs (``fl-<proxy>``) on the base proxyfleet uploaded (it must be there)."""
    pool = conn.storagePoolLookupByName("default")
    base = pool.storageVolLookupByName(base_name(lab)).path()
    return floor_vms(specs, pool_dir=os.path.dirname(base), base_path=base)


def running(conn: Any, prefix: str) -> int:
    return sum(
        1
        for d in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
        if d.name().startswith(prefix)
    )


def floor(conn: Any, lab: dict[str, Any], repo: Path, count: int) -> float:
    """The physical floor (benchmarks.floors): seconds of ``create_all`` alone."""
    vms = rendered(conn, lab, vm_specs(load_repo_at(repo), name=floor_name))
    started = time.perf_counter()
    create_all(conn, "default", vms, width=WIDTH)
    seconds = time.perf_counter() - started
    up = running(conn, FLOOR_PREFIX)
    if up != count:
        raise SystemExit(f"the minimal libvirt loop left {up} of {count} VMs running")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--wider",
        type=int,
        default=0,
        help="also time apply with concurrency.perHost this wide (0: not)",
    )
    parser.add_argument("--no-kcli", action="store_true", help="leave kcli out")
    parser.add_argument("--json", help="write the result here (for benchmarks.run)")
    args = parser.parse_args()

    result = Result(row="create", load_before=os.getloadavg(), busy=busy_text())
    lab = lab_up()
    host = lab_host(lab)
    hv = LibvirtHost(host, lab_ssh(lab))
    conn = hv.session.connection()
    repo = write_repo(args.count)
    state = bench_dir("pf-state")
    pf_cmd = apply_cmd(lab, repo, state, "--no-wait", "--json")
    pf_engine: list[float] = []
    wider = apply_config(
        bench_dir("create") / f"per-host-{args.wider}.yaml",
        repo,
        f"concurrency:\n  perHost: {args.wider}\n",
    )

    def proxyfleet(*extra: str) -> None:
        out = subprocess.run(
            [*pf_cmd, *extra], capture_output=True, text=True, timeout=1800, check=False
        )
        if out.returncode not in (0, 3):
            raise SystemExit(f"proxyfleet apply failed ({out.returncode}):\n{out.stderr}")
        report = json.loads(out.stdout)
        ok = [
            o for o in report["outcomes"] if o["action"] == "create" and o["result"] == "succeeded"
        ]
        if len(ok) != args.count:
            raise SystemExit(f"proxyfleet created {len(ok)} of {args.count}:\n{out.stdout}")
        if not extra:
            began, ended = (datetime.fromisoformat(report[k]) for k in ("started", "finished"))
            pf_engine.append((ended - began).total_seconds())

    have_kcli = kcli_bin().exists() and not args.no_kcli
    contenders: dict[str, Callable[[], float | None]] = {"proxyfleet apply": proxyfleet}
    contenders["minimal libvirt loop"] = lambda: floor(conn, lab, repo, args.count)
    if args.wider:
        contenders[f"proxyfleet apply, perHost {args.wider}"] = lambda: proxyfleet(*wider)
    if have_kcli:
        home = kcli_home(lab, host.address)
        ensure_bridge_network(conn)
        kcli_cmd = kcli_create_cmd(lab, args.count)

        def kcli() -> float:
            """One timed ``kcli create``; a run in which kcli itself fails (it has left one
            of the 20 out under load, exit 1) is removed and repeated once, and noted."""
            env = {**os.environ, "HOME": str(home)}
            for attempt in (1, 2):
                started = time.perf_counter()
                out = subprocess.run(
                    kcli_cmd, capture_output=True, text=True, timeout=1800, check=False, env=env
                )
                seconds = time.perf_counter() - started
                made = running(conn, f"{KCLI_PREFIX}-")
                if out.returncode == 0 and made == args.count:
                    return seconds
                why = out.stderr[-2000:]
                failed = f"kcli made {made} running VMs (exit {out.returncode}): {why}"
                if attempt == 2:
                    raise SystemExit(f"{failed}\n{out.stdout}")
                print(f"  {failed}\n  its VMs removed; the run repeated once", flush=True)
                result.note(f"one kcli run failed and was repeated ({failed.strip()[:300]})")
                remove_vms(hv, conn)
            raise AssertionError("unreachable")

        contenders["kcli create vm -c"] = kcli
    elif not args.no_kcli:
        result.note(f"kcli is not installed in {BENCH_VENV} (make bench installs it); no ratio")

    try:
        print(f"removed {remove_vms(hv, conn)} leftover VMs", flush=True)
        timed = alternate(
            contenders,
            runs=args.runs,
            between=lambda: print(f"  removed {remove_vms(hv, conn)} VMs", flush=True),
        )
    finally:
        remove_vms(hv, conn)
        hv.close()
    pf = result.add("proxyfleet", "s", timed["proxyfleet apply"])
    result.add("proxyfleet_engine", "s", pf_engine[1:])
    result.note(
        "proxyfleet's own reconcile (observe to check, no process start) took "
        f"{result.metrics['proxyfleet_engine'].text()}"
    )
    if args.wider:
        wide = result.add("proxyfleet_wider", "s", timed[f"proxyfleet apply, perHost {args.wider}"])
        result.note(f"proxyfleet apply with concurrency.perHost {args.wider}: {wide.text()}")
    if have_kcli:
        by_kcli = result.add("floor", "s", timed["kcli create vm -c"])
        result.note(
            f"{args.count} VMs: proxyfleet apply {pf.text()}, kcli {by_kcli.text()}: "
            f"ratio {pf.median / by_kcli.median:.2f}x"
        )
    physical = result.add("physical", "s", timed["minimal libvirt loop"])
    engine = result.metrics["proxyfleet_engine"]
    result.note(
        f"physical floor (minimal libvirt loop, {WIDTH} at a time on proxyfleet's connection) "
        f"{physical.text()}: apply {pf.median / physical.median:.2f}x, its reconcile "
        f"{engine.median / physical.median:.2f}x"
    )
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
