"""``proxyfleet hosts check``: is every hypervisor of fleet.yaml ready, and how big is it?

Per host, checked on its own so one failure hides nothing else: SSH (and
whether the libvirt socket is forwarded with streamlocal or through
virt-ssh-helper), libvirt and QEMU versions, the storage pool (active, free
space enough for the fleet's base images it does not hold yet plus one VM of
the largest machine type; image sizes from the image cache in the state dir,
else a HEAD request), the bridge or libvirt network, UEFI firmware (needed when
any image boots UEFI, the default), capacity (CPUs, memory), and whether KVM is
usable: a throw-away transient domain (``proxyfleet-kvm-probe``, no NIC, a 1 MiB
boot disk in the pool) boots under KVM and is watched until it reaches long mode
or KVM stops it (45 s for the whole probe); then it and its volume are removed.
A KVM that does not work, or a probe that cannot decide, fails the check only on
hosts with ``domainType: kvm``; on ``qemu`` (TCG) hosts it is information. Hosts
are checked in parallel; each says on stderr what it waits for, and when it is
done.

Exit codes: 0 every host is ready, 3 some host is not, 1 the repo or the
config is unusable, 64 a usage error (docs/operations.md, "Exit codes").
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import threading
import time
from dataclasses import asdict
from typing import Any

from reconciler.cli import compose, exitcodes
from reconciler.cli.common import (
    add_host_access_arguments,
    add_repo_argument,
    config_error,
    daemon_settings,
    ssh_settings,
    state_dir,
    table,
)
from reconciler.cli.globalflags import say as progress_line
from reconciler.cli.inventory import configure_logging
from reconciler.core.naming import resolve_image
from reconciler.errors import ConfigError
from reconciler.model import Firmware, Host, Image, Repo
from reconciler.model.hostcheck import BaseNeed, HostReport, Need
from reconciler.model.settings import SshSettings
from reconciler.model.vm import base_volume_name
from reconciler.ports.images import ImageSizes

EXIT_OK = exitcodes.OK
EXIT_ERROR = exitcodes.ERROR
EXIT_FAILED = exitcodes.DEGRADED


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "hosts",
        help="check the hypervisors",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="hosts_command", required=True, metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="SSH, libvirt version, pool, network, firmware, capacity and KVM of every host",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_repo_argument(check)
    add_host_access_arguments(check, state_dir=True)
    check.add_argument(
        "--host", action="append", metavar="NAME", help="check only this host (repeatable)"
    )
    check.add_argument("--json", action="store_true", help="print the reports as JSON")
    check.add_argument(
        "--no-kvm-probe",
        action="store_true",
        help="do not boot the throw-away guest that tells whether KVM is usable",
    )
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    configure_logging(args)
    repo = compose.load_repo_or_complain(args.repo)
    if repo is None:
        return EXIT_ERROR
    try:
        settings = daemon_settings(args)
        ssh = ssh_settings(args, settings.ssh)
        check = compose.host_check(ssh)  # says so when libvirt-python is not installed
    except ConfigError as exc:
        return config_error(exc)
    hosts = [h for h in repo.fleet.hosts if not args.host or h.name in args.host]
    unknown = sorted(set(args.host or ()) - {h.name for h in hosts})
    if unknown:
        print(f"proxyfleet: no such host in fleet.yaml: {', '.join(unknown)}", file=sys.stderr)
        return EXIT_ERROR
    images = compose.image_cache(settings, state_dir(args, settings.state_dir))
    need = dataclasses.replace(largest_vm(repo), images=base_needs(repo, images))
    reports = check_hosts(
        hosts,
        ssh,
        check,
        need_uefi=needs_uefi(repo),
        need=need,
        kvm_probe=not args.no_kvm_probe,
    )
    if args.json:
        print(json.dumps([report_json(r) for r in reports], indent=2))
    else:
        print(render_reports(reports))
    return EXIT_OK if all(r.ok for r in reports) else EXIT_FAILED


def needs_uefi(repo: Repo) -> bool:
    """UEFI firmware matters when an image boots UEFI or a proxy names a direct URL (UEFI)."""
    keys = {image.key for image in repo.fleet.images}
    direct = any(p.placement.image not in keys for p in repo.proxies)
    return direct or any(i.firmware is Firmware.UEFI for i in repo.fleet.images)


def base_needs(repo: Repo, images: ImageSizes) -> tuple[BaseNeed, ...]:
    """Every base the fleet may upload: fleet.yaml's images and the direct URLs the
    proxies name, each with its size (one cache stat or HEAD request per image)."""
    found: dict[str, Image] = {base_volume_name(i): i for i in repo.fleet.images}
    for proxy in repo.proxies:
        image = resolve_image(repo.fleet, proxy.placement.image)
        if image is not None:
            found.setdefault(base_volume_name(image), image)
    return tuple(
        BaseNeed(key=image.key, volume=volume, size_bytes=images.size(image))
        for volume, image in sorted(found.items())
    )


def largest_vm(repo: Repo) -> Need:
    """Room for one VM of the fleet's largest machine type (by disk, then memory)."""
    machines = repo.fleet.machine_types
    if not machines:
        return Need()
    disk = max(machines, key=lambda m: (m.disk_gib, m.memory_mib))
    memory = max(machines, key=lambda m: (m.memory_mib, m.disk_gib))
    # As placement counts it: a thin overlay's disk over policy.overcommit.disk.
    ratio = repo.fleet.policy.overcommit.disk
    counted = f" at overcommit {ratio:g}" if ratio != 1 else ""
    return Need(
        disk_bytes=int(disk.disk_gib * 2**30 / ratio),
        memory_mib=memory.memory_mib,
        what=f"the largest machine type ({disk.key}: {disk.disk_gib} GiB disk{counted}; "
        f"{memory.key}: {memory.memory_mib} MiB)",
    )


def check_hosts(
    hosts: list[Host],
    ssh: SshSettings,
    check_host: compose.HostCheck,
    *,
    need_uefi: bool,
    need: Need | None = None,
    kvm_probe: bool = True,
) -> list[HostReport]:
    """Every host of ``hosts`` checked by ``check_host``, in parallel; each says on stderr
    what it waits for, and when it is done."""
    reports: dict[str, HostReport] = {}
    lock = threading.Lock()

    def check(host: Host) -> None:
        started = time.monotonic()

        def say(text: str) -> None:
            progress_line(f"{host.name}: {text} ...")

        say(
            f"connecting over SSH to {host.address}:{host.port} (up to "
            f"{ssh.connect_timeout:.0f} s), then libvirt, pool, network, firmware, capacity"
        )
        report = check_host(
            host, need_uefi=need_uefi, need=need or Need(), kvm_probe=kvm_probe, say=say
        )
        verdict = "ready" if report.ok else "NOT ready"
        seconds = time.monotonic() - started
        progress_line(f"{host.name}: {verdict} after {seconds:.1f} s")
        with lock:
            reports[host.name] = report

    threads = [threading.Thread(target=check, args=(h,), name=f"check-{h.name}") for h in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [reports[h.name] for h in hosts]


def render_reports(reports: list[HostReport]) -> str:
    rows = [
        [report.host, item.name, "ok" if item.ok else "FAIL", item.detail]
        for report in reports
        for item in report.items
    ]
    failed = sum(1 for r in reports if not r.ok)
    summary = f"{len(reports) - failed} of {len(reports)} hosts ready"
    return table(["HOST", "CHECK", "STATUS", "DETAIL"], rows) + "\n" + summary


def report_json(report: HostReport) -> dict[str, Any]:
    data = asdict(report)
    data["ok"] = report.ok
    return data
