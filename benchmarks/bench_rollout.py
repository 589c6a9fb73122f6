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
  directory the lab's image server serves), commits, and times ``proxyfleet
  apply --yes --json``: the new base is uploaded and every proxy replaced
  through the rollout, batch after batch, each new VM health-gated before its
  old one goes. Meanwhile a thread (``lab.answering.Answering``) samples about
  every 2 s how many of the N proxies answer through squid: it sends the probe
  URL through every address in the host's DHCP leases and reads which proxy
  answered from squid's ``Via`` header (``visible_hostname`` is the proxy's
  name), so a proxy counts while its old *or* its new VM serves.
- Reported per run: the rollout's wall time; the least number answering at any
  sample; the number of batches (the plan's highest replace batch); one VM's
  create-to-healthy time, the median ``durationSeconds`` of the run's replaces
  (create, boot until the health check passes, delete the old VM); the floor,
  batches x that time; the ratio wall / floor. Then one more apply, after
  which the old base volume must be gone from the pool (bases are removed one
  run after their last overlay).

Every VM of the benchmark is deleted at the end. Nothing is asserted.

Run: ``PROXYFLEET_LAB_INSTANCE=2 .venv/bin/python -m benchmarks.bench_rollout
[--proxies N] [--max-surge 25%] [--runs 1]``.
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
from lab import imagebuild, imageupdate
from lab.answering import EVERY, Answering
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
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
    parser.add_argument("--json", help="write the result here (for benchmarks.run)")
    args = parser.parse_args()

    result = Result(row="rollout", load_before=os.getloadavg(), busy=busy_text())
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
        for run in range(args.runs):
            old, new = images[run % 2], images[(run + 1) % 2]
            write_fleet(repo, lab, new, rollout)
            git(repo, "commit", "-q", "-am", f"image {IMAGE_KEY}: {new.sha256[:12]}")
            with sampler:
                report, seconds = apply(cmd, scratch / f"apply-rollout-{run + 1}.log")
            errors = failed(report)
            replaces = [a for a in report["plan"]["actions"] if a["action"] == "replace"]
            durations = [
                o["durationSeconds"]
                for o in report["outcomes"]
                if o["action"] == "replace" and o["result"] == "succeeded"
            ]
            n_batches = max((a["batch"] or 1 for a in replaces), default=0)
            counts = [len(s) for _, s in sampler.samples] if sampler.samples else [0]
            vm = statistics.median(durations) if durations else 0.0
            floor = n_batches * vm
            wall.append(seconds)
            least.append(min(counts))
            batches.append(n_batches)
            one_vm.append(vm)
            floors.append(floor)
            ratios.append(seconds / floor if floor else 0.0)
            planned.append(len(replaces))
            replaced.append(len(durations))
            print(
                f"  run {run + 1}/{args.runs}: {len(replaces)} replaces in {n_batches} batches, "
                f"wall {seconds:.1f} s, least answering {min(counts)}/{args.proxies} "
                f"over {len(counts)} samples, one VM {vm:.1f} s, floor {floor:.1f} s, "
                f"ratio {ratios[-1]:.2f}x, {len(durations)} of {len(replaces)} replaced"
                + (f"; failed: {errors}" if errors else ""),
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
    result.note(
        f"{args.proxies} proxies, maxSurge {args.max_surge}, maxUnavailable "
        f"{args.max_unavailable}, replaceTimeoutSeconds {args.replace_timeout:g}; "
        f"warm-up created them all answering in {ready:.0f} s; "
        f"rollout wall {w.text(1)}, least answering {lo.low:.0f} of {args.proxies}, "
        f"{b.text(0)}, replaces that succeeded {int(min(replaced, default=0))} of "
        f"{int(max(planned, default=0))} (the least of any run), "
        f"one VM create-to-healthy (median replace) {v.text(1)}, "
        f"floor {f.text(1)}: ratio {w.median / f.median if f.median else 0:.2f}x; "
        f"old base gone after one more apply in {int(sum(gone))} of {len(gone)} runs"
    )
    emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
