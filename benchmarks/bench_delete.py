"""Row 2c: deleting 20 proxy VMs with their volumes, proxyfleet against ``kcli delete vm``.

Before each timed run, untimed, each side creates its 20 VMs as row 2 does
(``benchmarks.bench_create``: 1 vCPU, 256 MiB, a 3 GiB qcow2 overlay on the
lab image's base, a seed ISO, BIOS, TCG) and then **pauses** them all
(``virDomainSuspend``): 20 TCG guests booting on this 2-core machine would
starve it, and both tools then face the same state, 20 paused domains, whose
delete is a destroy (the QEMU process killed), an undefine and two volume
deletes each.

- proxyfleet: the repo's next commit removes the 20 manifests (and says
  ``allowEmpty: true`` and ``acknowledgeShrinkTo: 0``, as an operator's
  commit would; the bench fleet's ``maxDeletesPerRun`` is 1000, so the delete
  window of the row's fresh state dir never blocks);
  ``proxyfleet apply --yes --json`` is timed as a whole command (process
  start, SSH dial, load, observe, guards, plan, 20 deletes
  ``concurrency.deletesPerHost`` at a time on the session's lanes, the status);
- the daemon (``proxyfleet -v run``, file watch on the repo's path, as row 4;
  a state dir of its own, emptied but for its image cache before each run):
  started once its side's 20 VMs are created (by ``apply``, untimed) and
  paused, and once its startup reconcile has finished (20 paused keeps), the
  same next commit is made; timed from the commit to the end of the last of the
  40 volume deletes, read from its trace (each line says when a call ended).
  This is the path an operator's commit takes; the daemon keeps its imports,
  repo and host connection, so none of ``apply``'s start-up is in it;
- the physical floor (``benchmarks.floors``): as many at a time as proxyfleet's
  ``concurrency.deletesPerHost``, on as many connections as proxyfleet's lanes (up
  to five deletes on each; each connection its own SSH-forwarded socket, as
  proxyfleet's), per VM a lookup, ``virDomainDestroy``,
  ``virDomainUndefineFlags`` and a lookup and a delete of each of its two
  volumes; its VMs (``fl-<proxy>``, rendered by proxyfleet's code) are
  created by the same libvirt loop as row 2's floor;
- kcli: ``kcli delete vm -y -c 20 kc`` (``kc-0`` ... ``kc-19``, as ``kcli
  create vm -c 20 kc`` named them), the whole command timed.

After every run, on both sides, nothing of the 20 VMs may be left on the
host: no domain, no volume in the pool (after a refresh), no file in the pool
directory, no NVRAM file, no domain definition in the host's
``/etc/libvirt/qemu``; anything left ends the benchmark with an error (it is
a correctness condition, not a timing). The VMs are BIOS guests, as row 2's,
so libvirt gives them no NVRAM file; the check is there for a UEFI fleet.

Run: ``PROXYFLEET_LAB_INSTANCE=2 .venv/bin/python -m benchmarks.bench_delete``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import libvirt

from benchmarks.bench_create import (
    KCLI_PREFIX,
    WIDTH,
    ensure_bridge_network,
    kcli_bin,
    kcli_create_cmd,
    kcli_home,
    remove_vms,
    rendered,
)
from benchmarks.bench_trigger import FINISHED, Daemon, daemon_config, free_port, rpc_ends
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
from benchmarks.floors import create_all, delete_all, floor_name, lanes_for
from benchmarks.specs import vm_specs
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.model.settings import ApplySettings

DELETE_WIDTH = ApplySettings().delete_concurrency
"""proxyfleet's deletes at once per host (``concurrency.deletesPerHost``), the floor's too."""
FLEET = "dl"
IMAGE_KEY = "debian12-bios"
POLICY = (
    "prune: true\n    maxDeletesPerRun: 1000\n    drift: correct\n"
    "    overcommit: {cpu: 20, disk: 10, memory: 4}"
)
EMPTY_POLICY = POLICY + "\n    allowEmpty: true\n    acknowledgeShrinkTo: 0"
HOST_DIRS = (
    "var-lib-libvirt/images",
    "var-lib-libvirt/qemu/nvram",
    "etc-libvirt/qemu",
)
"""Where a VM leaves files on a lab host (below ``lab/state*/hosts/<host>/``): the pool,
libvirt's NVRAM files, the persistent domain definitions."""


def write_repo(count: int) -> tuple[Path, str, str]:
    """The repo, its commit with ``count`` proxies and the next one with none."""
    root = fresh_dir("delete") / "repo"
    root.mkdir()
    (root / "fleet.yaml").write_text(fleet_yaml(FLEET, policy=POLICY))
    names = [f"{FLEET}-{i:02d}" for i in range(count)]
    for name in names:
        (root / f"{name}.yaml").write_text(proxy_yaml(name, image=IMAGE_KEY))
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", f"{count} proxies")
    full = git(root, "rev-parse", "HEAD").strip()
    git(root, "rm", "-q", *(f"{name}.yaml" for name in names))
    (root / "fleet.yaml").write_text(fleet_yaml(FLEET, policy=EMPTY_POLICY))
    git(root, "commit", "-q", "-a", "-m", "remove every proxy")
    empty = git(root, "rev-parse", "HEAD").strip()
    return root, full, empty


def left_in_dirs(host_dir: Path, prefix: str) -> list[str]:
    """Files named ``prefix*`` in the host's pool, NVRAM and definition directories."""
    left: list[str] = []
    for sub in HOST_DIRS:
        directory = host_dir / sub
        if directory.is_dir():
            left.extend(
                f"file {sub}/{path.name}"
                for path in sorted(directory.iterdir())
                if path.name.startswith(prefix)
            )
    return left


def named(kind: str, names: Iterable[str], prefix: str) -> list[str]:
    return [f"{kind} {name}" for name in sorted(names) if name.startswith(prefix)]


def left_on_host(conn: Any, host_dir: Path, prefix: str) -> list[str]:
    """Everything of the VMs named ``prefix*`` still on the host: domains, volumes, files."""
    pool = conn.storagePoolLookupByName("default")
    pool.refresh(0)
    return [
        *named("domain", (d.name() for d in conn.listAllDomains(0)), prefix),
        *named("volume", (v.name() for v in pool.listAllVolumes(0)), prefix),
        *left_in_dirs(host_dir, prefix),
    ]


def pause_all(conn: Any, prefix: str, count: int) -> None:
    """Suspend every running domain named ``prefix*``; there must be ``count``."""
    running = [
        d
        for d in conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE)
        if d.name().startswith(prefix)
    ]
    if len(running) != count:
        raise SystemExit(f"{len(running)} VMs named {prefix}* run, not {count}")
    for dom in running:
        dom.suspend()
    paused = sum(1 for d in running if d.state()[0] == libvirt.VIR_DOMAIN_PAUSED)
    if paused != count:
        raise SystemExit(f"only {paused} of {count} VMs named {prefix}* are paused")


def run(cmd: list[str], *, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=1800, check=False, env=env)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-kcli", action="store_true", help="leave kcli out")
    parser.add_argument(
        "--deletes-per-host",
        type=int,
        default=DELETE_WIDTH,
        help="proxyfleet's concurrency.deletesPerHost (a daemon config setting), and the "
        f"floor's width (default: the shipped {DELETE_WIDTH})",
    )
    parser.add_argument(
        "--verbose-log", help="write proxyfleet's -v log of each timed apply here (appended)"
    )
    parser.add_argument("--json", help="write the result here (for benchmarks.run)")
    args = parser.parse_args()

    from lab import config

    result = Result(row="delete", load_before=os.getloadavg(), busy=busy_text())
    lab = lab_up()
    host = lab_host(lab)
    host_dir = config.HOSTS_DIR / host.name
    hv = LibvirtHost(host, lab_ssh(lab))
    conn = hv.session.connection()
    repo, full, empty = write_repo(args.count)
    pf_cmd = apply_cmd(lab, repo, fresh_dir("delete-state"), "--json")
    width = args.deletes_per_host
    if width != DELETE_WIDTH:
        pf_cmd += apply_config(
            bench_dir("delete") / f"deletes-per-host-{width}.yaml",
            repo,
            f"concurrency:\n  deletesPerHost: {width}\n",
        )
        result.note(f"proxyfleet with concurrency.deletesPerHost {width}")
    ours = f"pf-{FLEET}-"

    def nothing_left(prefix: str, who: str) -> None:
        left = left_on_host(conn, host_dir, prefix)
        if left:
            raise SystemExit(f"{who} left {len(left)} things on the host: {', '.join(left)}")

    def outcomes(out: subprocess.CompletedProcess[str], action: str, ok: int = 0) -> int:
        """Succeeded ``action``s in apply's report; exit code ``ok`` (3: --no-wait's
        unhealthy new VMs) or 0."""
        if out.returncode not in (0, ok):
            raise SystemExit(f"proxyfleet apply failed ({out.returncode}):\n{out.stderr}")
        report = json.loads(out.stdout)
        return sum(
            1 for o in report["outcomes"] if o["action"] == action and o["result"] == "succeeded"
        )

    def proxyfleet() -> float:
        git(repo, "reset", "-q", "--hard", full)
        made = outcomes(run([*pf_cmd, "--no-wait"]), "create", ok=3)
        if made != args.count:
            raise SystemExit(f"proxyfleet created {made} of {args.count}")
        pause_all(conn, ours, args.count)
        git(repo, "reset", "-q", "--hard", empty)
        verbose = ["-v"] if args.verbose_log else []
        started = time.perf_counter()
        out = run([pf_cmd[0], *verbose, *pf_cmd[1:]])
        seconds = time.perf_counter() - started
        if args.verbose_log:
            with open(args.verbose_log, "a") as log:
                log.write(out.stderr)
        deleted = outcomes(out, "delete")
        if deleted != args.count:
            raise SystemExit(f"proxyfleet deleted {deleted} of {args.count}:\n{out.stdout}")
        nothing_left(ours, "proxyfleet apply")
        return seconds

    git(repo, "reset", "-q", "--hard", full)
    specs = vm_specs(load_repo_at(repo), name=floor_name)
    # the floor's deletes on as many connections as proxyfleet's lanes, each its own link
    floor_conns = [
        LibvirtHost(host, lab_ssh(lab)).session.connection() for _ in range(lanes_for(width))
    ]

    def minimal() -> float:
        vms = rendered(conn, lab, specs)
        create_all(conn, "default", vms, width=WIDTH)
        pause_all(conn, FLOOR_PREFIX, args.count)
        started = time.perf_counter()
        delete_all(floor_conns, "default", vms, width=width)
        seconds = time.perf_counter() - started
        nothing_left(FLOOR_PREFIX, "the minimal libvirt loop")
        return seconds

    daemon_state = bench_dir("delete-daemon-state")  # kept: only its image cache survives a run

    runs = itertools.count()

    def by_daemon() -> float:
        index = next(runs)
        git(repo, "reset", "-q", "--hard", full)
        made = outcomes(run([*pf_cmd, "--no-wait"]), "create", ok=3)
        if made != args.count:
            raise SystemExit(f"proxyfleet created {made} of {args.count}")
        pause_all(conn, ours, args.count)
        config = daemon_config(
            bench_dir("delete") / f"daemon-{index}.yaml",
            url=str(repo),
            lab=lab,
            port=free_port(),
            state=daemon_state,
            extra=f"concurrency:\n  deletesPerHost: {width}\n",
        )
        daemon = Daemon(config, bench_dir("delete") / f"daemon-{index}.log", dict(os.environ))
        try:
            daemon.wait_for(FINISHED)
            time.sleep(0.5)  # idle: the watcher armed, the loop waiting
            git(repo, "reset", "-q", "--hard", empty)
            committed = time.time()
            daemon.wait_for("rpc=virStorageVolDelete ", count=2 * args.count, timeout=300)
            text = daemon.text()
        finally:
            daemon.stop()
        if args.verbose_log:
            with open(args.verbose_log, "a") as log:
                log.write(text)
        ends = [t for t in rpc_ends(text, "virStorageVolDelete") if t >= committed]
        if len(ends) != 2 * args.count:
            raise SystemExit(f"the daemon deleted {len(ends)} volumes, not {2 * args.count}")
        nothing_left(ours, "proxyfleet run")
        return max(ends) - committed

    contenders: dict[str, Callable[[], float | None]] = {
        "proxyfleet apply": proxyfleet,
        "proxyfleet run": by_daemon,
        "minimal libvirt loop": minimal,
    }
    have_kcli = kcli_bin().exists() and not args.no_kcli
    if have_kcli:
        env = {**os.environ, "HOME": str(kcli_home(lab, host.address))}
        ensure_bridge_network(conn)
        theirs = f"{KCLI_PREFIX}-"
        delete_cmd = [str(kcli_bin()), "delete", "vm", "-y", "-c", str(args.count), KCLI_PREFIX]

        def kcli() -> float:
            out = run(kcli_create_cmd(lab, args.count), env=env)
            if out.returncode != 0:
                raise SystemExit(
                    f"kcli create failed ({out.returncode}):\n{out.stdout}{out.stderr}"
                )
            pause_all(conn, theirs, args.count)
            started = time.perf_counter()
            out = run(delete_cmd, env=env)
            seconds = time.perf_counter() - started
            if out.returncode != 0:
                raise SystemExit(
                    f"kcli delete failed ({out.returncode}):\n{out.stdout}{out.stderr}"
                )
            nothing_left(theirs, "kcli delete vm")
            return seconds

        contenders["kcli delete vm -c"] = kcli
    elif not args.no_kcli:
        result.note(f"kcli is not installed in {BENCH_VENV} (make bench installs it); no ratio")

    try:
        print(f"removed {remove_vms(hv, conn, FLEET)} leftover VMs", flush=True)
        timed = alternate(contenders, runs=args.runs)
    finally:
        remove_vms(hv, conn, FLEET)
        hv.close()
    pf = result.add("proxyfleet", "s", timed["proxyfleet apply"])
    by_run = result.add("daemon", "s", timed["proxyfleet run"])
    result.add("count", "VMs", [args.count])
    physical = result.add("physical", "s", timed["minimal libvirt loop"])
    result.note(
        f"physical floor (minimal libvirt loop, {width} at a time on "
        f"{lanes_for(width)} connection(s)) "
        f"{physical.text()}: proxyfleet apply {pf.median / physical.median:.2f}x, "
        f"the daemon {by_run.median / physical.median:.2f}x"
    )
    result.note(
        f"the daemon (proxyfleet run, file watch): from the commit to its last volume "
        f"delete {by_run.text()}"
    )
    what = f"{args.count} paused VMs with their volumes, nothing left on the host after any"
    if have_kcli:
        by_kcli = result.add("floor", "s", timed["kcli delete vm -c"])
        result.note(
            f"{what}: proxyfleet apply {pf.text()}, kcli {by_kcli.text()}: "
            f"ratio {pf.median / by_kcli.median:.2f}x; the daemon "
            f"{by_run.median / by_kcli.median:.2f}x"
        )
    else:
        result.note(f"{what}: proxyfleet apply {pf.text()}")
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
