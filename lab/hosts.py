"""Lab hypervisors: one network + mount namespace per host, with its own daemons.

A host is of kind ``debian12`` (the machine's own libvirt 9 and QEMU 7.2) or ``debian13``
(libvirt 11 and QEMU 10 from the cached trixie root of ``lab/hostroot.py``, entered with
pivot_root by ``holder.sh``); the kind is kept in the host's state directory.

Host ``pfhostN`` is a network namespace of that name joined to the root namespace by a veth
(root ``pfhostN`` 10.77.N.1/30 <-> ``uplink`` 10.77.N.2/30), a bridge ``br0`` (10.78.N.1/24,
a MAC of its own: ``HostLayout.bridge_mac`` says why) for its guests with dnsmasq for DHCP,
and a private mount namespace held by ``holder.sh`` in which /run, /etc/libvirt,
/var/lib/libvirt, /var/log/libvirt and /var/cache/libvirt are the host's own. virtlogd,
libvirtd, sshd, dnsmasq and the 204 probe server run there.
Beside ``br0``, libvirt itself runs a network ``labnet`` (bridge ``labnet0``, 10.80.N.1/24,
forward mode ``open`` so libvirt writes no firewall rule, DHCP by libvirt's own dnsmasq,
whose leases libvirt reports); the root namespace routes 10.80.N.0/24 to the host's veth.
Every step is idempotent: ``up`` repairs what is missing and leaves what runs alone.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from lab import config
from lab.config import HostLayout

HOLDER = config.LAB_DIR / "holder.sh"
REPO = config.LAB_DIR.parent
KINDS = ("debian12", "debian13")
DAEMON_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "LANG": "C.UTF-8"}


class LabError(RuntimeError):
    """A lab step failed; the message says which and why."""


@dataclass(frozen=True)
class Proc:
    pid: int
    name: str
    cmdline: str


def run(*cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    if check and proc.returncode != 0:
        raise LabError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc


def netns_exists(name: str) -> bool:
    return Path("/run/netns", name).exists()


def link_exists(name: str, netns: str | None = None) -> bool:
    prefix = ("ip", "-n", netns) if netns else ("ip",)
    return run(*prefix, "link", "show", name, check=False).returncode == 0


def processes_in_netns(name: str) -> list[Proc]:
    """Every process whose network namespace is the lab netns ``name``."""
    try:
        target = os.stat(Path("/run/netns", name))
    except FileNotFoundError:
        return []
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ns = os.stat(entry / "ns" / "net")
            if (ns.st_ino, ns.st_dev) != (target.st_ino, target.st_dev):
                continue
            raw = (entry / "cmdline").read_bytes()
            exe = os.readlink(entry / "exe")
        except OSError:
            continue
        cmdline = raw.replace(b"\0", b" ").decode(errors="replace").strip()
        found.append(Proc(int(entry.name), Path(exe).name.removesuffix(" (deleted)"), cmdline))
    return sorted(found, key=lambda p: p.pid)


def holder_pid(host: HostLayout) -> int | None:
    try:
        pid = int(host.holder_pid_file.read_text())
    except (OSError, ValueError):
        return None
    alive = any(p.pid == pid for p in processes_in_netns(host.netns))
    return pid if alive else None


def host_kind(host: HostLayout) -> str:
    """``debian12`` or ``debian13``, as ``up`` recorded it (``debian12`` when unrecorded)."""
    try:
        return (host.state / "kind").read_text().strip() or KINDS[0]
    except OSError:
        return KINDS[0]


def host_root(host: HostLayout) -> Path | None:
    """The Debian 13 root a ``debian13`` host runs from (None: the machine's own)."""
    if host_kind(host) != "debian13":
        return None
    try:
        return Path((host.state / "root.path").read_text().strip())
    except OSError as exc:
        raise LabError(f"{host.name}: debian13 host without root.path") from exc


def in_host(host: HostLayout, *cmd: str, check: bool = True, timeout: float = 60) -> str:
    """Run ``cmd`` inside the host's network and mount namespaces; return its stdout."""
    pid = holder_pid(host)
    if pid is None:
        raise LabError(f"{host.name}: its namespace holder is not running")
    return run(
        "nsenter", "-t", str(pid), "-m", "-n", "-u", *cmd, check=check, timeout=timeout
    ).stdout


# --- network -------------------------------------------------------------------------------


def ensure_network(host: HostLayout) -> None:
    ns = host.netns
    if not netns_exists(ns):
        run("ip", "netns", "add", ns)
    if not link_exists(host.veth_root):
        if link_exists("uplink", ns):
            run("ip", "-n", ns, "link", "del", "uplink")
        run(
            "ip",
            "link",
            "add",
            host.veth_root,
            "type",
            "veth",
            "peer",
            "name",
            "uplink",
            "netns",
            ns,
        )
    run("ip", "addr", "replace", f"{host.root_address}/30", "dev", host.veth_root)
    run("ip", "link", "set", host.veth_root, "up")
    run("ip", "-n", ns, "link", "set", "lo", "up")
    run("ip", "-n", ns, "addr", "replace", f"{host.address}/30", "dev", "uplink")
    run("ip", "-n", ns, "link", "set", "uplink", "up")
    if not link_exists("br0", ns):
        run(
            "ip",
            "-n",
            ns,
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "forward_delay",
            "0",
            "stp_state",
            "0",
        )
    run("ip", "-n", ns, "link", "set", "br0", "address", host.bridge_mac)
    run("ip", "-n", ns, "addr", "replace", f"{host.bridge_address}/24", "dev", "br0")
    run("ip", "-n", ns, "link", "set", "br0", "up")
    run("ip", "-n", ns, "addr", "replace", f"{config.PROBE_ADDRESS}/32", "dev", "lo")
    run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
    for subnet in (host.guest_subnet, host.network_subnet):
        run("ip", "route", "replace", subnet, "via", host.address, "dev", host.veth_root)


# --- files ---------------------------------------------------------------------------------


def ensure_keys(hosts: list[HostLayout]) -> None:
    config.SSH_DIR.mkdir(parents=True, exist_ok=True)
    config.HOSTKEY_DIR.mkdir(parents=True, exist_ok=True)
    if not config.KEY_FILE.exists():
        run(
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "proxyfleet-lab",
            "-f",
            str(config.KEY_FILE),
        )
    config.KEY_FILE.chmod(0o600)
    pub = Path(f"{config.KEY_FILE}.pub").read_text()
    config.AUTHORIZED_KEYS.write_text(pub)
    for host in hosts:
        if not host.hostkey.exists():
            run(
                "ssh-keygen",
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                host.name,
                "-f",
                str(host.hostkey),
            )
        host.hostkey.chmod(0o600)


def known_hosts_line(address: str, port: int, key: str) -> str:
    """OpenSSH's form: a bare address for port 22, ``[address]:port`` otherwise."""
    where = address if port == 22 else f"[{address}]:{port}"
    kind, blob = key.split()[:2]
    return f"{where} {kind} {blob}"


def write_known_hosts(hosts: list[HostLayout]) -> None:
    lines = [known_hosts_line(h.address, 22, Path(f"{h.hostkey}.pub").read_text()) for h in hosts]
    config.KNOWN_HOSTS.write_text("".join(f"{line}\n" for line in lines))


def ensure_host_files(host: HostLayout) -> None:
    st = host.state
    (st / "log" / "qemu").mkdir(parents=True, exist_ok=True)
    for sub in ("images", "qemu/nvram", "qemu/save", "qemu/dump", "qemu/snapshot", "boot"):
        (st / "var-lib-libvirt" / sub).mkdir(parents=True, exist_ok=True)
    etc = st / "etc-libvirt"
    if not etc.exists():
        root = host_root(host)
        shutil.copytree(root / "etc/libvirt" if root else "/etc/libvirt", etc, symlinks=True)
        # A stock host's domains, pools and autostarted networks are not this host's.
        for sub in ("qemu/networks/autostart", "storage"):
            shutil.rmtree(etc / sub, ignore_errors=True)
        for xml in (etc / "qemu").glob("*.xml"):
            xml.unlink()
        (etc / "qemu" / "networks" / "autostart").mkdir(parents=True, exist_ok=True)
    (etc / "libvirtd.conf").write_text(
        "# proxyfleet lab: root over the unix socket only (sshd forwards it).\n"
        'unix_sock_group = "root"\nunix_sock_rw_perms = "0770"\nauth_unix_rw = "none"\n'
        'auth_unix_ro = "none"\n'
    )
    (etc / "qemu.conf").write_text(
        "# proxyfleet lab: /dev/kvm is root-only here and the namespaced hosts share one\n"
        "# cgroup tree, so QEMU runs as root without cgroup controllers.\n"
        'user = "root"\ngroup = "root"\nsecurity_driver = "none"\ncgroup_controllers = [ ]\n'
        'stdio_handler = "logd"\n'
    )
    (st / "sshd_config").write_text(
        f"Port 22\nListenAddress {host.address}\nHostKey {host.hostkey}\n"
        f"PidFile /run/sshd.pid\nAuthorizedKeysFile {config.AUTHORIZED_KEYS}\n"
        "PermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPrintMotd no\n"
        "AllowTcpForwarding yes\nAllowStreamLocalForwarding yes\n"
        "MaxSessions 64\nMaxStartups 64:30:128\nClientAliveInterval 30\n"
        "Subsystem sftp /usr/lib/openssh/sftp-server\n"
    )


# --- processes -----------------------------------------------------------------------------


def ensure_holder(host: HostLayout) -> int:
    pid = holder_pid(host)
    if pid is not None:
        return pid
    ready = host.state / "holder.ready"
    ready.unlink(missing_ok=True)
    root = host_root(host)
    # A debian13 host sees the repo (probe server) and the lab state (sshd config, keys,
    # dnsmasq leases) at their own paths inside its root.
    root_args = [str(root), str(REPO), str(config.STATE)] if root else []
    with open(host.state / "holder.log", "ab") as log:
        proc = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                host.netns,
                "unshare",
                "--mount",
                "--uts",
                "--propagation",
                "private",
                "bash",
                str(HOLDER),
                str(host.state),
                host.name,
                *root_args,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=DAEMON_ENV,
        )
    host.holder_pid_file.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 20
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise LabError(f"{host.name}: namespace holder failed, see {host.state}/holder.log")
        time.sleep(0.05)
    return proc.pid


def _daemons(host: HostLayout) -> list[tuple[str, list[str]]]:
    low, high = host.dhcp_range
    st = host.state
    # Inside a debian13 host's root the venv's interpreter (the machine's python3.11) is
    # not there; the probe server needs only the standard library.
    python = "python3" if host_root(host) else sys.executable
    return [
        ("virtlogd", ["/usr/sbin/virtlogd"]),
        # Under lab.reaper: an exited QEMU is reaped at once, as systemd does on a
        # hypervisor (this machine's PID 1 takes seconds, which every destroy waited for).
        ("libvirtd", [python, "-m", "lab.reaper", "/usr/sbin/libvirtd"]),
        ("sshd", ["/usr/sbin/sshd", "-D", "-e", "-f", str(st / "sshd_config")]),
        (
            "dnsmasq",
            [
                "/usr/sbin/dnsmasq",
                "--keep-in-foreground",
                "--conf-file=/dev/null",
                "--interface=br0",
                "--bind-interfaces",
                "--except-interface=lo",
                "--no-resolv",
                "--no-hosts",
                "--user=root",
                "--group=root",
                "--pid-file=/run/lab-dnsmasq.pid",
                f"--dhcp-range={low},{high},255.255.255.0,1h",
                f"--dhcp-leasefile={host.leases}",
                "--dhcp-authoritative",
                f"--log-facility={st / 'dnsmasq.log'}",
                "--log-dhcp",
            ],
        ),
        (
            "python",
            [python, "-m", "lab.servers", "probe", "--port", str(config.PROBE_PORT)],
        ),
    ]


def _is(proc: Proc, name: str) -> bool:
    """Whether ``proc`` is the lab daemon ``name``: ``python`` is the probe server (its
    executable is python3.N), and ``dnsmasq`` the lab's own on br0, not libvirt's for
    ``labnet``."""
    if name == "python":
        return "lab.servers probe" in proc.cmdline
    if name == "dnsmasq":
        return proc.name == name and "lab-dnsmasq.pid" in proc.cmdline
    return proc.name == name


def _running(host: HostLayout, name: str) -> Proc | None:
    return next((p for p in processes_in_netns(host.netns) if _is(p, name)), None)


def start_daemon(host: HostLayout, name: str) -> None:
    """Start one of the host's daemons unless it already runs; wait until it answers."""
    if _running(host, name) is not None:
        return
    argv = dict(_daemons(host))[name]
    pid = ensure_holder(host)
    label = "probe" if name == "python" else name
    with open(host.state / f"{label}.log", "ab") as log:
        subprocess.Popen(
            ["nsenter", "-t", str(pid), "-m", "-n", "-u", *argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=REPO,
            env={**DAEMON_ENV, "PYTHONPATH": str(REPO)},
        )
    _wait_ready(host, name)


def _wait_ready(host: HostLayout, name: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if _ready(host, name):
            return
        if time.monotonic() > deadline:
            label = "probe" if name == "python" else name
            raise LabError(f"{host.name}: {label} did not come up, see {host.state}/{label}.log")
        time.sleep(0.2)


def host_ok(host: HostLayout, *cmd: str) -> bool:
    """Whether ``cmd`` succeeds inside the host's namespaces."""
    pid = holder_pid(host)
    return (
        pid is not None
        and run("nsenter", "-t", str(pid), "-m", "-n", "-u", *cmd, check=False).returncode == 0
    )


def _ready(host: HostLayout, name: str) -> bool:
    if name == "virtlogd":
        return host_ok(host, "test", "-S", "/run/libvirt/virtlogd-sock")
    if name == "libvirtd":
        return host_ok(host, "virsh", "-c", "qemu:///system", "version")
    if name == "sshd":
        return tcp_open(host.address, 22)
    if name == "python":
        return host_ok(
            host,
            "python3",
            "-c",
            "import socket; socket.create_connection("
            f"('{config.PROBE_ADDRESS}', {config.PROBE_PORT}), 1)",
        )
    return _running(host, name) is not None


def stop_daemon(host: HostLayout, name: str, *, timeout: float = 10) -> None:
    """Stop one daemon of the host (SIGTERM, then SIGKILL) and wait until it is gone.
    ``python`` is the probe server (its executable's name is python3.N)."""
    victims = [p for p in processes_in_netns(host.netns) if _is(p, name)]
    _terminate([p.pid for p in victims], timeout=timeout)


def _terminate(pids: list[int], *, timeout: float) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = [p for p in pids if Path(f"/proc/{p}").exists() and not _zombie(p)]
            if not pids:
                return
            time.sleep(0.1)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def tcp_open(address: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def ensure_pool(host: HostLayout) -> None:
    virsh = ("virsh", "-q", "-c", "qemu:///system")
    if not host_ok(host, *virsh, "pool-info", "default"):
        in_host(
            host, *virsh, "pool-define-as", "default", "dir", "--target", "/var/lib/libvirt/images"
        )
        in_host(host, *virsh, "pool-build", "default")
        in_host(host, *virsh, "pool-autostart", "default")
    if "running" not in in_host(host, *virsh, "pool-info", "default"):
        in_host(host, *virsh, "pool-start", "default")


def network_xml(host: HostLayout) -> str:
    """``labnet``: forward mode ``open`` (routed by the host namespace as it is, no firewall
    rule from libvirt), DHCP from libvirt's dnsmasq, no DNS."""
    low, high = host.network_dhcp_range
    net = ET.Element("network")
    ET.SubElement(net, "name").text = config.LIBVIRT_NETWORK
    ET.SubElement(net, "forward", mode="open")
    ET.SubElement(net, "bridge", name=f"{config.LIBVIRT_NETWORK}0", stp="off", delay="0")
    # No DNS: libvirt's dnsmasq would forward to the machine's resolvers, which a host
    # namespace cannot reach (a guest's apt would wait on every lookup); like br0's.
    ET.SubElement(net, "dns", enable="no")
    ip = ET.SubElement(net, "ip", address=host.network_address, netmask="255.255.255.0")
    ET.SubElement(ET.SubElement(ip, "dhcp"), "range", start=low, end=high)
    return ET.tostring(net, encoding="unicode")


def ensure_libvirt_network(host: HostLayout) -> None:
    """Define, autostart and start ``labnet`` unless it already is."""
    virsh = ("virsh", "-q", "-c", "qemu:///system")
    name = config.LIBVIRT_NETWORK
    if not host_ok(host, *virsh, "net-info", name):
        xml = host.state / "labnet.xml"
        xml.write_text(network_xml(host))
        # The state dir is at its own path inside a debian13 host's root too.
        in_host(host, *virsh, "net-define", str(xml))
        in_host(host, *virsh, "net-autostart", name)
    if not re.search(r"^Active:\s+yes", in_host(host, *virsh, "net-info", name), re.M):
        in_host(host, *virsh, "net-start", name)


# --- whole host ----------------------------------------------------------------------------


def set_kind(host: HostLayout, kind: str, root: Path | None) -> None:
    """Record the host's kind (a host of another kind is taken down first: its namespace,
    daemons and libvirt state belong to the other libvirt)."""
    if host.state.exists() and host_kind(host) != kind:
        down_host(host)
    host.state.mkdir(parents=True, exist_ok=True)
    (host.state / "kind").write_text(f"{kind}\n")
    if root is not None:
        (host.state / "root.path").write_text(f"{root}\n")


LIGHT_DAEMONS = ("virtlogd", "libvirtd", "sshd")
"""What a light host runs (``lab up --light``): libvirt and SSH, no DHCP, no probe and no
``labnet``, for benchmarks of many hosts that start no guest."""


def up_host(host: HostLayout, *, light: bool = False) -> None:
    ensure_network(host)
    ensure_host_files(host)
    ensure_holder(host)
    for name, _ in _daemons(host):
        if not light or name in LIGHT_DAEMONS:
            start_daemon(host, name)
    ensure_pool(host)
    if not light:
        ensure_libvirt_network(host)


def down_host(host: HostLayout, *, keep_state: bool = False) -> None:
    """Kill every process of the host, then drop its namespace, links and route."""
    _terminate([p.pid for p in processes_in_netns(host.netns)], timeout=10)
    if netns_exists(host.netns):
        run("ip", "netns", "del", host.netns)
    # Deleting the netns takes the veth pair with it, asynchronously: the root end may
    # still be listed and gone by the time it is deleted ("Cannot find device").
    if link_exists(host.veth_root):
        run("ip", "link", "del", host.veth_root, check=False)
    if link_exists(host.veth_root):
        raise LabError(f"{host.name}: link {host.veth_root} is still there")
    for subnet in (host.guest_subnet, host.network_subnet):
        run("ip", "route", "del", subnet, check=False)
    if not keep_state:
        shutil.rmtree(host.state, ignore_errors=True)


def existing_hosts() -> list[HostLayout]:
    """Every lab host that has any trace: a netns, a root veth or a state dir."""
    found: set[int] = set()
    names = [line.split()[0] for line in run("ip", "netns", "list").stdout.splitlines() if line]
    names += [p.name for p in config.HOSTS_DIR.glob(f"{config.NETNS_PREFIX}*")]
    links = run("ip", "-o", "link", "show").stdout.splitlines()
    names += [line.split(":")[1].strip().split("@")[0] for line in links]
    for name in names:
        layout = HostLayout.from_name(name)
        if layout is not None:
            found.add(layout.n)
    return [HostLayout(n) for n in sorted(found)]
