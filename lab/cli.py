"""``python -m lab up|down|status|image|daemon``: the lab's command line.

up [--hosts N] [--debian13 K] [--light]
                      bring up N namespaced hypervisors (default 2, at most 10) and the image
                      server; the last K of them Debian 13 (libvirt 11) hosts, the rest
                      Debian 12; --light: libvirtd, virtlogd and sshd only (no dnsmasq, no
                      probe), for benchmarks of many hosts that start no guest
down [--keep-state]   remove every namespace, process, mount, link and route of the lab
status                show what of the lab exists
image [--force]       build the guest image unless the cache holds it for this recipe, and
                      derive its agentoff variant (qemu-guest-agent not started) from it
daemon ACTION NAME --host N   stop/start/restart sshd, libvirtd, ... or the probe on one host
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lab import boottest as lab_boottest
from lab import config, hostroot, hosts, imagebuild, imagevariant
from lab.config import HostLayout


def _log(text: str) -> None:
    print(text, flush=True)


# --- image server --------------------------------------------------------------------------


def image_server_pid() -> int | None:
    try:
        pid = int(config.IMAGE_SERVER_PID.read_text())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return None
    return pid if b"lab.servers\0images" in cmdline else None


def ensure_image_server() -> int:
    pid = image_server_pid()
    if pid is not None:
        return pid
    config.IMAGES_DIR.mkdir(parents=True, exist_ok=True)
    with open(config.STATE / "image-server.log", "ab") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lab.servers",
                "images",
                "--root",
                str(config.IMAGES_DIR),
                "--port",
                str(config.IMAGE_PORT),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=hosts.REPO,
            env={**hosts.DAEMON_ENV, "PYTHONPATH": str(hosts.REPO)},
        )
    config.IMAGE_SERVER_PID.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 10
    while not hosts.tcp_open("127.0.0.1", config.IMAGE_PORT):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise hosts.LabError(f"image server failed, see {config.STATE}/image-server.log")
        time.sleep(0.1)
    return proc.pid


def stop_image_server() -> None:
    pid = image_server_pid()
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        for _ in range(50):
            if not Path(f"/proc/{pid}").exists():
                break
            time.sleep(0.1)
    config.IMAGE_SERVER_PID.unlink(missing_ok=True)


def image_url(image: imagebuild.Image) -> str:
    return f"http://127.0.0.1:{config.IMAGE_PORT}/{image.path.name}"


# --- outputs -------------------------------------------------------------------------------


def write_outputs(layouts: list[HostLayout]) -> None:
    """hosts.yaml (a ``spec.hosts`` snippet), images.yaml and lab.json for tests and demo."""
    lines = ["# spec.hosts for fleet.yaml, written by `python -m lab up`", "hosts:"]
    for h in layouts:
        lines += [
            f"  - name: {h.name}",
            f"    address: {h.address}",
            "    port: 22",
            "    user: root",
            f"    zone: {h.zone}",
            "    pool: default",
            "    network: {bridge: br0}",
            "    domainType: qemu",
            "    cpuMode: none",
        ]
    config.HOSTS_YAML.write_text("\n".join(lines) + "\n")
    image = imagebuild.cached(config.IMAGES_DIR)
    variant = None if image is None else imagevariant.cached(config.IMAGES_DIR, image)
    if image is not None:
        files = [(image, "debian12")] + ([(variant, "debian12-agentoff")] if variant else [])
        config.IMAGES_YAML.write_text(
            "# spec.images for fleet.yaml: each file booted by either firmware (agentoff: "
            "qemu-guest-agent not started, lab/imagevariant.py)\n"
            "images:\n"
            + "".join(
                f"  {key}{suffix}:\n    url: {image_url(img)}\n    sha256: {img.sha256}\n"
                f"    format: qcow2\n    firmware: {fw}\n"
                for img, key in files
                for suffix, fw in (("", "uefi"), ("-bios", "bios"))
            )
        )
    lab = {
        "hosts": [
            {
                "name": h.name,
                "address": h.address,
                "port": 22,
                "user": "root",
                "zone": h.zone,
                "bridge": "br0",
                "guestSubnet": h.guest_subnet,
                "network": config.LIBVIRT_NETWORK,
                "networkSubnet": h.network_subnet,
                "netns": h.netns,
                "kind": hosts.host_kind(h),
            }
            for h in layouts
        ],
        "sshKey": str(config.KEY_FILE),
        "knownHosts": str(config.KNOWN_HOSTS),
        "probeUrl": config.PROBE_URL,
        "imageServer": f"http://127.0.0.1:{config.IMAGE_PORT}/",
        "image": None
        if image is None
        else {"url": image_url(image), "sha256": image.sha256, "path": str(image.path)},
        "agentoffImage": None
        if variant is None
        else {"url": image_url(variant), "sha256": variant.sha256, "path": str(variant.path)},
    }
    config.LAB_JSON.write_text(json.dumps(lab, indent=2) + "\n")


# --- commands ------------------------------------------------------------------------------


def up(count: int, *, debian13: int = 0, light: bool = False) -> list[HostLayout]:
    if not 1 <= count <= config.MAX_HOSTS:
        raise hosts.LabError(f"--hosts must be 1..{config.MAX_HOSTS}")
    if not 0 <= debian13 <= count:
        raise hosts.LabError(f"--debian13 must be 0..{count}")
    wanted = [HostLayout(n) for n in range(1, count + 1)]
    root = None
    if debian13:
        started = time.monotonic()
        built = hostroot.build(config.IMAGES_DIR)
        root = built.path
        how = f"built in {built.seconds:.0f}s" if built.built else "cached"
        _log(f"debian13 root {root} ({how}): {built.versions} [{time.monotonic() - started:.1f}s]")
    for extra in hosts.existing_hosts():
        if extra.n > count:
            _log(f"{extra.name}: beyond --hosts {count}, removing")
            hosts.down_host(extra)
    hosts.ensure_keys(wanted)
    for h in wanted:
        started = time.monotonic()
        kind = "debian13" if h.n > count - debian13 else "debian12"
        hosts.set_kind(h, kind, root if kind == "debian13" else None)
        hosts.up_host(h, light=light)
        _log(
            f"{h.name}: {kind}{' (light)' if light else ''} up at {h.address} ({h.zone}), "
            f"guests on br0 {h.guest_subnet} "
            f"[{time.monotonic() - started:.1f}s]"
        )
    hosts.write_known_hosts(wanted)
    ensure_image_server()
    write_outputs(wanted)
    _log(f"image server: http://127.0.0.1:{config.IMAGE_PORT}/ ; probe URL: {config.PROBE_URL}")
    _log(f"key {config.KEY_FILE}, known_hosts {config.KNOWN_HOSTS}, hosts {config.HOSTS_YAML}")
    return wanted


def down(*, keep_state: bool = False) -> None:
    for h in hosts.existing_hosts():
        hosts.down_host(h, keep_state=keep_state)
        _log(f"{h.name}: removed")
    stop_image_server()
    for path in (config.HOSTS_YAML, config.LAB_JSON, config.KNOWN_HOSTS):
        path.unlink(missing_ok=True)


def status() -> int:
    """Print every trace of the lab; exit 0 if something of it exists, 3 if nothing."""
    found = hosts.existing_hosts()
    for h in found:
        ns = "netns" if hosts.netns_exists(h.netns) else "no netns"
        veth = "veth" if hosts.link_exists(h.veth_root) else "no veth"
        route = hosts.run("ip", "route", "show", h.guest_subnet).stdout.strip() or "no route"
        ssh = "ssh open" if hosts.tcp_open(h.address, 22, timeout=0.5) else "ssh closed"
        kind = hosts.host_kind(h)
        _log(f"{h.name} ({kind}, {h.address}, {h.zone}): {ns}, {veth}, {ssh}; route {route}")
        for proc in hosts.processes_in_netns(h.netns):
            _log(f"  pid {proc.pid:>7} {proc.name:<10} {proc.cmdline[:90]}")
        if hosts.holder_pid(h) is not None and hosts.host_ok(
            h, "virsh", "-c", "qemu:///system", "version"
        ):
            doms = hosts.in_host(
                h, "virsh", "-q", "-c", "qemu:///system", "list", "--all", "--name"
            ).split()
            pools = hosts.in_host(
                h, "virsh", "-q", "-c", "qemu:///system", "pool-list", "--all"
            ).strip()
            _log(f"  domains: {', '.join(doms) or '-'}; pools: {' '.join(pools.split())}")
    pid = image_server_pid()
    where = f"pid {pid} on 127.0.0.1:{config.IMAGE_PORT}" if pid else "off"
    _log(f"image server: {where}")
    image = imagebuild.cached(config.IMAGES_DIR)
    _log(
        f"image: {image.path} sha256 {image.sha256}"
        if image
        else f"image: not built for recipe {imagebuild.recipe_key()[:12]}"
    )
    if not found and pid is None:
        _log("lab: down")
        return 3
    return 0


def image(*, force: bool) -> imagebuild.Image:
    hit = None if force else imagebuild.cached(config.IMAGES_DIR)
    if hit is None:
        _log(
            f"building image for recipe {imagebuild.recipe_key()[:12]} "
            f"(log: {config.IMAGES_DIR}/build.log) ..."
        )
    img = imagebuild.build(config.IMAGES_DIR, force=force, log=config.IMAGES_DIR / "build.log")
    how = f"built in {img.seconds:.0f}s" if img.built else "cached"
    _log(f"image {img.path} ({how})\nsha256 {img.sha256}\nurl {image_url(img)}")
    variant = imagevariant.build(config.IMAGES_DIR, img, log=config.IMAGES_DIR / "build.log")
    how = f"derived in {variant.seconds:.0f}s" if variant.built else "cached"
    _log(f"agentoff variant {variant.path} ({how})\nsha256 {variant.sha256}")
    if config.LAB_JSON.exists():
        names = [h["name"] for h in json.loads(config.LAB_JSON.read_text())["hosts"]]
        layouts = [HostLayout.from_name(n) for n in names]
        write_outputs([layout for layout in layouts if layout is not None])
    return img


def boottest(firmwares: list[str], *, accel: str, timeout: float) -> int:
    """Boot the image once per firmware (no NIC) and print the measured times."""
    img = image(force=False)
    boot_dir = config.STATE / "boottest"
    boot_dir.mkdir(parents=True, exist_ok=True)
    failed = 0
    for fw in firmwares:
        res = lab_boottest.boot(img.path, fw, accel=accel, timeout=timeout, workdir=boot_dir)
        agent = f"{res.agent_seconds:.0f}s" if res.agent_seconds is not None else "never"
        final = f"{res.final_seconds:.0f}s" if res.final_seconds is not None else "never"
        _log(
            f"{fw} ({accel}): guest agent answered after {agent}, cloud-init final after "
            f"{final}; console {res.console}"
        )
        failed += res.agent_seconds is None or res.final_seconds is None
    return 1 if failed else 0


def daemon(action: str, name: str, n: int) -> None:
    """``probe`` is the host's 204 server (http://10.79.0.1/generate_204): stopped, every
    proxy of the host fails its health probe while the guests themselves are fine."""
    host = HostLayout(n)
    name = "python" if name == "probe" else name
    if action in ("stop", "restart"):
        hosts.stop_daemon(host, name)
    if action in ("start", "restart"):
        hosts.start_daemon(host, name)
    _log(f"{host.name}: {name} {action} done")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lab",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("--hosts", type=int, default=2)
    p_up.add_argument(
        "--debian13", type=int, default=0, metavar="K", help="the last K hosts run Debian 13"
    )
    p_up.add_argument(
        "--light", action="store_true", help="libvirtd, virtlogd and sshd only: no DHCP, no probe"
    )
    p_down = sub.add_parser("down")
    p_down.add_argument("--keep-state", action="store_true")
    sub.add_parser("status")
    p_img = sub.add_parser("image")
    p_img.add_argument("--force", action="store_true")
    p_d = sub.add_parser("daemon")
    p_d.add_argument("action", choices=["stop", "start", "restart"])
    p_d.add_argument("name", choices=["sshd", "libvirtd", "virtlogd", "dnsmasq", "probe"])
    p_d.add_argument("--host", type=int, required=True)
    p_b = sub.add_parser("boottest")
    p_b.add_argument("--firmware", choices=["uefi", "bios"], action="append")
    p_b.add_argument("--accel", choices=["tcg", "kvm"], default="tcg")
    p_b.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("the lab needs root (namespaces, mounts, links)")
    try:
        if args.cmd == "up":
            up(args.hosts, debian13=args.debian13, light=args.light)
        elif args.cmd == "down":
            down(keep_state=args.keep_state)
        elif args.cmd == "status":
            return status()
        elif args.cmd == "image":
            image(force=args.force)
        elif args.cmd == "boottest":
            return boottest(
                args.firmware or ["uefi", "bios"], accel=args.accel, timeout=args.timeout
            )
        else:
            daemon(args.action, args.name, args.host)
    except (hosts.LabError, subprocess.CalledProcessError) as exc:
        print(f"lab: {exc}", file=sys.stderr)
        return 1
    return 0
