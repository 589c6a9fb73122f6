"""Row 6: an image update rolled over N proxies on the lab, against the floor.

N proxies (default 20; ``--proxies``) run squid on one lab host, BIOS (SeaBIOS
boots a little faster than OVMF under TCG here, docs/lab.md), each with a
cloud-config that configures, enables and starts squid, and a health check
that fetches the lab's probe URL through that squid. The fleet's
``policy.rollout`` says ``maxSurge`` (``--max-surge``, default 25%) and
``maxUnavailable`` (``--max-unavailable``, default 0).

- Warm-up: the N proxies are created (``proxyfleet apply --yes --json``) and
  the benchmark waits until every one of them answers through its squid.
- Each measured run changes the image key's ``url`` and ``sha256`` to the
  other of two byte-different copies of the lab image (the lab image itself,
  and a copy ``qemu-img convert``-ed once with zstd compression instead of
  zlib, ``lab.imageupdate.recompressed``, cached beside it in the image
  directory the lab's image server serves) and commits, with ``proxyfleet
  run`` watching the repo (interval 1 h: the follow-up runs, every 30 s while
  a new VM is not healthy, pace the rollout, as they do in production). Runs
  never wait for a boot (issue 39): each makes a batch's new VMs and returns; a
  later run finds them healthy, deletes their old VMs and starts the next
  batch. Timed: from the commit until the last old VM is gone. Meanwhile a
  thread (``lab.answering.Answering``) samples about every 2 s how many of the
  N proxies answer through squid: it sends the probe URL through every address
  in the host's DHCP leases and reads which proxy answered from squid's
  ``Via`` header (``visible_hostname`` is the proxy's name), so a proxy counts
  while its old *or* its new VM serves; and another
  (``benchmarks.rollout_watch.NewVms``) notes when each new VM is first listed
  and first answers through its own address.
- Reported per run: the rollout's wall time; the least number answering at any
  sample; the number of batches (from ``maxSurge`` and ``maxUnavailable``);
  one VM's create-to-healthy, the median over the new VMs of first answer
  minus first listing (what a run that waited for the boot took); the floor,
  batches x that time; the ratio wall / floor. Then one more apply, after
  which the old base volume must be gone from the pool (bases are removed one
  run after their last overlay).
- ``--kill`` (row 6b): once the rollout's first new VM is listed, the QEMU of
  the old VM that rolls last is SIGKILLed; reported: the seconds from the kill
  to the daemon's ``Start of ... succeeded`` (target: within 2 follow-up
  intervals), beside the rollout's own figures.

Every VM of the benchmark is deleted at the end. Nothing is asserted.

Run: ``PROXYFLEET_LAB_INSTANCE=2 .venv/bin/python -m benchmarks.bench_rollout
[--proxies N] [--max-surge 25%] [--runs 1] [--kill]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.bench_trigger import FINISHED, Daemon, daemon_config, free_port
from benchmarks.common import (
    Result,
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
)
from benchmarks.rollout_watch import EVERY, NewVms, kill_qemu, logged_at
from lab import imagebuild, imageupdate
from lab.answering import Answering
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.engine.daemon import FOLLOW_UP
from reconciler.model import Image
from reconciler.model.vm import base_volume_name

FLEET = "ro"
IMAGE_KEY = "debian12-bios"
MACHINE = (1, 512, 4)
"""vCPUs, MiB, GiB: what the lab tests give a squid guest."""
HEALTHY_WAIT = 3600.0
"""How long the warm-up waits for every created proxy to answer (2,043 s on 2026-12-04)."""
REPLACE_TIMEOUT = 1800.0
"""``replaceTimeoutSeconds`` for the rollout: a new VM booting under TCG beside 20 running
guests on 2 cores took more than the default 600 s on 2026-12-04 (18 of 20 replaces failed)."""
VIA_NAME = re.compile(rf"\b({FLEET}-\d+)-v1")


@dataclass(frozen=True)
class LabImage:
    url: str
    sha256: str


# -- the second image -------------------------------------------------------------


def second_image(lab: dict[str, Any]) -> LabImage:
    """A byte-different copy of the lab image (lab.imageupdate.recompressed), served by the
    lab's image server."""
    from lab import config

    source = imagebuild.cached(config.IMAGES_DIR)
    if source is None or str(source.path) != lab["image"]["path"]:
        raise SystemExit(f"the lab image {lab['image']['path']} is not in {config.IMAGES_DIR}")
    copy = imageupdate.recompressed(source)
    return LabImage(lab["imageServer"].rstrip("/") + "/" + copy.path.name, copy.sha256)


# -- the repo ---------------------------------------------------------------------


def squid_user_data(name: str) -> str:
    """tests/lab/labutil.py's cloud-config (the lab image ships squid off): squid's
    ``visible_hostname``, and so the ``Via`` of every answer, starts with ``NAME-v1``."""
    return (
        "#cloud-config\n"
        f"hostname: {name}\n"
        "write_files:\n"
        "  - path: /etc/squid/squid.conf\n"
        "    defer: true\n"
        "    content: |\n"
        "      http_port 3128\n"
        f"      visible_hostname {name}-v1\n"
        "      acl lan src 10.0.0.0/8\n"
        "      http_access allow localhost\n"
        "      http_access allow lan\n"
        "      http_access deny all\n"
        "      cache deny all\n"
        "      coredump_dir /var/spool/squid\n"
        "runcmd:\n"
        "  - [systemctl, enable, squid]\n"
        "  - [systemctl, restart, squid]\n"
    )


def proxy_yaml(name: str, probe_url: str) -> str:
    user_data = "".join(f"      {line}\n" for line in squid_user_data(name).splitlines())
    return (
        "apiVersion: proxyfleet/v1\nkind: Proxy\n"
        f"metadata:\n  name: {name}\n"
        f"spec:\n  placement:\n    zone: zone-a\n    image: {IMAGE_KEY}\n    machineType: tiny\n"
        "  cloudInit:\n    userData: |\n"
        + user_data
        + f"  health:\n    probeURL: {probe_url}\n    expectStatus: 204\n    timeoutSeconds: 10\n"
    )


def yaml_value(text: str) -> str:
    """A count as an integer, a percentage as a quoted string."""
    return text if text.isdigit() else json.dumps(text)


def unavailable(text: str, proxies: int) -> int:
    """``maxUnavailable`` as a count of the zone's proxies (a percentage rounds down)."""
    if text.endswith("%"):
        return proxies * int(text[:-1]) // 100
    return int(text)


def names(count: int) -> list[str]:
    return [f"{FLEET}-{i:02d}" for i in range(count)]


def write_fleet(repo: Path, lab: dict[str, Any], image: LabImage, rollout: str) -> None:
    # 20 proxies plus the surge on the lab's zone-a hosts, which all run on this one 2-core
    # machine: placement's default ratios (4 vCPUs per CPU, thin overlays counted whole at
    # 4 GiB each) would block the warm-up long before 20; the machine's memory is what
    # bounds it here (25 x (512 MiB + the 256 MiB TCG cache) fits its 24 GiB), though
    # libvirt may report less of it (benchmarks.common.POLICY), hence memory's ratio 2.
    policy = (
        "prune: true\n    maxDeletesPerRun: 50\n    drift: correct\n"
        "    overcommit: {cpu: 20, disk: 10, memory: 2}\n    rollout:\n" + rollout
    )
    text = fleet_yaml(FLEET, machine=MACHINE, policy=policy)
    first = lab["image"]
    (repo / "fleet.yaml").write_text(
        text.replace(first["url"], image.url).replace(first["sha256"], image.sha256)
    )


# -- proxyfleet -------------------------------------------------------------------


def apply(cmd: list[str], log: Path) -> tuple[dict[str, Any], float]:
    """``proxyfleet -v apply --yes --json``: its JSON and the command's wall time."""
    started = time.perf_counter()
    with log.open("w") as err:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, check=False)
    seconds = time.perf_counter() - started
    if out.returncode not in (0, 3) or not out.stdout:
        raise SystemExit(f"proxyfleet apply failed ({out.returncode}), see {log}")
    report: dict[str, Any] = json.loads(out.stdout)
    return report, seconds


def failed(report: dict[str, Any]) -> list[str]:
    return [
        f"{o['action']} {o['proxy']}: {o['error']}"
        for o in report["outcomes"]
        if o["result"] != "succeeded"
    ]


def remove_vms(hv: LibvirtHost, conn: Any) -> int:
    removed = 0
    for dom in conn.listAllDomains(0):
        if dom.name().startswith(f"pf-{FLEET}-"):
            hv.delete(dom.name())
            removed += 1
    return removed


@dataclass(frozen=True)
class Rolled:
    """One rollout by the daemon, as seen from outside."""

    wall: float
    """Seconds from the commit to the last old VM gone (every proxy on a new VM)."""
    complete: bool
    create_to_healthy: list[float]
    heal: float | None = None
    """Seconds from the kill (``--kill``) to the daemon's start of the killed VM."""
    heal_text: str = ""


def batches_of(proxies: int, surge: str, unavailable_: str) -> int:
    """The rollout's batches: maxSurge (a percentage rounds up) plus maxUnavailable (down)
    replaces at a time."""
    up = -(-proxies * int(surge[:-1]) // 100) if surge.endswith("%") else int(surge)
    size = max(1, up + unavailable(unavailable_, proxies))
    return -(-proxies // size)


def by_daemon(
    lab: dict[str, Any],
    repo: Path,
    conn: Any,
    sampler: Answering,
    *,
    new_image: LabImage,
    rollout: str,
    proxies: int,
    batches: int,
    replace_timeout: float,
    kill: bool,
    log: Path,
) -> Rolled:
    """Commit ``new_image`` with ``proxyfleet run`` watching the repo (interval 1 h, so that
    the follow-up runs, every FOLLOW_UP s while a new VM is not healthy, pace the rollout)
    and wait until every old VM is gone. ``kill``: once the first new VM is listed, SIGKILL
    the QEMU of an old VM that rolls last and time the daemon's start of it."""
    from lab import config

    layout = config.HostLayout.from_name(lab_host(lab).name)
    assert layout is not None
    prefix = f"pf-{FLEET}-"
    old = sorted(d.name() for d in conn.listAllDomains(0) if d.name().startswith(prefix))
    settings = f"replaceTimeoutSeconds: {replace_timeout:g}\n"
    daemon_file = daemon_config(
        log.with_suffix(".yaml"),
        url=str(repo),
        lab=lab,
        port=free_port(),
        state=bench_dir("rollout-daemon-state"),
        extra=settings,
    )
    daemon = Daemon(daemon_file, log, dict(os.environ))
    heal, heal_text = None, ""
    try:
        daemon.wait_for(FINISHED, timeout=1800)
        with sampler, NewVms(conn, prefix, old, url=lab["probeUrl"], leases=layout.leases) as vms:
            write_fleet(repo, lab, new_image, rollout)
            git(repo, "commit", "-q", "-am", f"image {IMAGE_KEY}: {new_image.sha256[:12]}")
            committed = time.time()
            deadline = time.monotonic() + batches * replace_timeout + 600
            if kill:
                while not vms.defined and time.monotonic() < deadline:
                    time.sleep(0.2)
                victim = old[-1]  # batches go by proxy name: the last rolls last
                runs = daemon.text().count("Reconcile started")
                killed = kill_qemu(layout.netns, victim)
                needle = f"Start of {victim} on {layout.name} succeeded"
                daemon.wait_for(needle, timeout=1800)
                heal = (logged_at(daemon.text(), needle) or killed) - killed
                text = daemon.text()
                runs = text[: text.find(needle)].count("Reconcile started") - runs
                heal_text = (
                    f"{victim} killed {killed - committed:.0f} s after the commit, started "
                    f"{heal:.1f} s later by the {runs}th run since, "
                    f"{len(vms.healthy)} of {proxies} new VMs healthy by then"
                )
            while (set(old) & vms.listed or len(vms.listed) < proxies) and (
                time.monotonic() < deadline
            ):
                time.sleep(EVERY)
            wall = time.time() - committed
            complete = not set(old) & vms.listed and len(vms.healthy) == proxies
    finally:
        daemon.stop()
    return Rolled(wall, complete, vms.create_to_healthy(), heal, heal_text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proxies", type=int, default=20)
    parser.add_argument("--max-surge", default="25%", help="policy.rollout.maxSurge")
    parser.add_argument("--max-unavailable", default="0", help="policy.rollout.maxUnavailable")
    parser.add_argument("--runs", type=int, default=1, help="measured rollouts (images alternate)")
    parser.add_argument(
        "--replace-timeout",
        type=float,
        default=REPLACE_TIMEOUT,
        help="replaceTimeoutSeconds of apply's config (the daemon's default is 600)",
    )
    parser.add_argument(
        "--kill",
        action="store_true",
        help="row 6b: SIGKILL an old VM's QEMU once the rollout's first new VM is listed",
    )
    parser.add_argument("--json", help="write the result here (for benchmarks.run)")
    args = parser.parse_args()

    result = Result(
        row="rollout-heal" if args.kill else "rollout",
        load_before=os.getloadavg(),
        busy=busy_text(),
    )
    lab = lab_up()
    from lab import config

    host = lab_host(lab)
    layout = config.HostLayout.from_name(host.name)
    assert layout is not None
    pool_dir = layout.state / "var-lib-libvirt" / "images"
    images = [LabImage(lab["image"]["url"], lab["image"]["sha256"]), second_image(lab)]
    rollout = (
        f"      maxSurge: {yaml_value(args.max_surge)}\n"
        f"      maxUnavailable: {yaml_value(args.max_unavailable)}\n"
    )
    scratch = fresh_dir("rollout")
    repo = scratch / "repo"
    repo.mkdir()
    write_fleet(repo, lab, images[0], rollout)
    for name in names(args.proxies):
        (repo / f"{name}.yaml").write_text(proxy_yaml(name, lab["probeUrl"]))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", f"{args.proxies} proxies")
    cmd = apply_cmd(lab, repo, bench_dir("pf-state"), "-v", "--json") + apply_config(
        scratch / "proxyfleet.yaml", repo, f"replaceTimeoutSeconds: {args.replace_timeout:g}\n"
    )
    hv = LibvirtHost(host, lab_ssh(lab))
    conn = hv.session.connection()
    sampler = Answering([layout.leases], lab["probeUrl"], VIA_NAME)
    wall: list[float] = []
    least: list[float] = []
    batches: list[float] = []
    one_vm: list[float] = []
    floors: list[float] = []
    ratios: list[float] = []
    gone: list[float] = []
    planned: list[float] = []
    replaced: list[float] = []
    heal: list[float] = []
    heal_texts: list[str] = []
    try:
        print(f"removed {remove_vms(hv, conn)} leftover VMs", flush=True)
        # Warm-up: create the N proxies, wait until every one answers through squid.
        began = time.perf_counter()
        report, seconds = apply(cmd, scratch / "apply-create.log")
        if failed(report):
            raise SystemExit("creates failed:\n" + "\n".join(failed(report)))
        deadline = time.monotonic() + HEALTHY_WAIT
        while len(seen := sampler.once()) < args.proxies:
            if time.monotonic() > deadline:
                raise SystemExit(f"only {len(seen)} of {args.proxies} answer after the creates")
            time.sleep(EVERY)
        ready = time.perf_counter() - began
        print(
            f"  warm-up: apply {seconds:.1f} s, all {args.proxies} answering after {ready:.1f} s",
            flush=True,
        )
        n_batches = batches_of(args.proxies, args.max_surge, args.max_unavailable)
        for run in range(args.runs):
            old, new = images[run % 2], images[(run + 1) % 2]
            rolled = by_daemon(
                lab,
                repo,
                conn,
                sampler,
                new_image=new,
                rollout=rollout,
                proxies=args.proxies,
                batches=n_batches,
                replace_timeout=args.replace_timeout,
                kill=args.kill,
                log=scratch / f"daemon-{run + 1}.log",
            )
            counts = [len(s) for _, s in sampler.samples] if sampler.samples else [0]
            vm = statistics.median(rolled.create_to_healthy) if rolled.create_to_healthy else 0.0
            floor = n_batches * vm
            wall.append(rolled.wall)
            least.append(min(counts))
            batches.append(n_batches)
            one_vm.append(vm)
            floors.append(floor)
            ratios.append(rolled.wall / floor if floor else 0.0)
            planned.append(args.proxies)
            replaced.append(len(rolled.create_to_healthy) if rolled.complete else 0)
            if rolled.heal is not None:
                heal.append(rolled.heal)
                heal_texts.append(rolled.heal_text)
            print(
                f"  run {run + 1}/{args.runs}: {args.proxies} replaces in {n_batches} batches, "
                f"wall {rolled.wall:.1f} s, least answering {min(counts)}/{args.proxies} "
                f"over {len(counts)} samples, one VM {vm:.1f} s, floor {floor:.1f} s, "
                f"ratio {ratios[-1]:.2f}x, {len(rolled.create_to_healthy)} new VMs healthy"
                + ("" if rolled.complete else ", NOT rolled out")
                + (f"; {rolled.heal_text}" if rolled.heal_text else ""),
                flush=True,
            )
            # One more apply: the old base has no overlay left and goes now.
            old_base = base_volume_name(Image(key=IMAGE_KEY, url="", sha256=old.sha256))
            report, seconds = apply(cmd, scratch / f"apply-after-{run + 1}.log")
            still = (pool_dir / old_base).exists()
            gone.append(0.0 if still else 1.0)
            print(
                f"  next apply {seconds:.1f} s: old base {old_base} "
                + ("still in the pool" if still else "gone"),
                flush=True,
            )
    finally:
        print(f"removed {remove_vms(hv, conn)} VMs", flush=True)
        sampler.close()
        hv.close()
    w = result.add("proxyfleet", "s", wall)
    lo = result.add("least_answering", "proxies", least)
    b = result.add("batches", "batches", batches)
    v = result.add("one_vm", "s", one_vm)
    f = result.add("floor", "s", floors)
    result.add("ratio", "x", ratios)
    result.add("old_base_gone", "runs", gone)
    result.add("proxies", "proxies", [args.proxies])
    result.add("replaces", "replaces", planned)
    result.add("replaced", "replaces", replaced)
    result.add("max_unavailable", "proxies", [unavailable(args.max_unavailable, args.proxies)])
    if heal:
        h = result.add("heal", "s", heal)
        result.add("follow_up", "s", [FOLLOW_UP])
        result.note(
            f"a VM killed during the rollout: started again {h.text(1)} after the kill "
            f"(follow-up interval {FOLLOW_UP:g} s); {' / '.join(heal_texts)}"
        )
    result.note(
        f"{args.proxies} proxies, maxSurge {args.max_surge}, maxUnavailable "
        f"{args.max_unavailable}, replaceTimeoutSeconds {args.replace_timeout:g}; "
        f"warm-up created them all answering in {ready:.0f} s; "
        f"rollout wall {w.text(1)}, least answering {lo.low:.0f} of {args.proxies}, "
        f"{b.text(0)}, replaces that succeeded {int(min(replaced, default=0))} of "
        f"{int(max(planned, default=0))} (the least of any run), "
        f"one VM create-to-healthy (median, watched beside the daemon) {v.text(1)}, "
        f"floor {f.text(1)}: ratio {w.median / f.median if f.median else 0:.2f}x; "
        f"old base gone after one more apply in {int(sum(gone))} of {len(gone)} runs"
    )
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
