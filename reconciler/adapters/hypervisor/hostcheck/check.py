"""``proxyfleet hosts check``: is a hypervisor ready for proxyfleet, and how big is it?

One report per host: SSH + libvirt reachability (and which way the socket is
forwarded), libvirt and QEMU versions, the storage pool (present, active,
free space: room for the fleet's base images it does not hold yet plus one VM
of the largest machine type), the network or bridge, OVMF for UEFI guests
(from the domain capabilities of the host's domain type on q35), capacity
(CPUs, memory), and whether KVM is usable (``adapters.hypervisor.hostcheck.kvmprobe``
boots a throw-away guest; a failure fails the check only on a host whose
``domainType`` is kvm). Each item is checked on its own, so one failure does
not hide the others.
"""

from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import libvirt

from reconciler.adapters.hypervisor.hostcheck.kvmprobe import PROBE_TIMEOUT, probe_kvm
from reconciler.errors import HostError, PermanentError
from reconciler.model.fleet import DomainType
from reconciler.model.hostcheck import BaseNeed, CheckItem, HostReport, Need
from reconciler.model.vm import base_marker_name

if TYPE_CHECKING:
    from reconciler.adapters.hypervisor.images.baseimage import BaseImages
    from reconciler.adapters.hypervisor.transport.libvirtrpc import LibvirtSession


NO_NEED = Need()
"""The default ``need``: no base image and no VM to make room for."""


def version_text(number: int) -> str:
    """libvirt's packed version (major * 1e6 + minor * 1e3 + micro) as ``9.0.0``."""
    return f"{number // 1_000_000}.{number // 1000 % 1000}.{number % 1000}"


def _missing(images: tuple[BaseNeed, ...], volumes: set[str]) -> list[BaseNeed]:
    return [
        b for b in images if b.volume not in volumes or base_marker_name(b.volume) not in volumes
    ]


def _uploads(missing: list[BaseNeed]) -> str:
    """``base images not in the pool yet: debian 0.3 GiB, alpine (size not known yet)``."""
    parts = [
        f"{b.key} {b.size_bytes / 2**30:.1f} GiB"
        if b.size_bytes is not None
        else f"{b.key} (size not known yet)"
        for b in missing
    ]
    return "base images not in the pool yet: " + ", ".join(parts)


def check_host(
    session: LibvirtSession,
    images: BaseImages,
    *,
    need_uefi: bool = True,
    need: Need = NO_NEED,
    kvm_probe: bool = True,
    say: Callable[[str], None] = lambda _text: None,
) -> HostReport:
    """Every item of the host; ``say`` is told what the check waits for next (progress)."""
    host = session.host
    items: list[CheckItem] = []
    try:
        session.connection()
    except HostError as exc:
        return HostReport(host=host.name, items=(CheckItem("ssh", False, str(exc)),))
    items.append(
        CheckItem("ssh", True, f"{host.user}@{host.address}:{host.port} via {session.via}")
    )
    facts: dict[str, Any] = {}

    def run(name: str, check: Callable[[], str]) -> None:
        try:
            items.append(CheckItem(name, True, check()))
        except HostError as exc:
            items.append(CheckItem(name, False, str(exc)))
        except _Failed as exc:
            items.append(CheckItem(name, False, str(exc)))

    def versions() -> str:
        facts["libvirt"] = version_text(
            session.call("virConnectGetLibVersion", lambda c: c.getLibVersion())
        )
        facts["qemu"] = version_text(session.call("virConnectGetVersion", lambda c: c.getVersion()))
        return f"libvirt {facts['libvirt']}, QEMU {facts['qemu']}"

    def pool() -> str:
        handle = images.pool()
        with contextlib.suppress(HostError):  # an inactive pool refuses; info says so below
            # libvirt counts free space at the last refresh: files written since do not show.
            session.call("virStoragePoolRefresh", lambda _c: handle.refresh(0), pool=host.pool)
        state, capacity, _allocation, available = session.call(
            "virStoragePoolGetInfo", lambda _c: handle.info(), pool=host.pool
        )
        facts["pool_free"] = available
        if state != libvirt.VIR_STORAGE_POOL_RUNNING:
            raise _Failed(
                f"pool {host.pool!r} exists but is not active (virsh pool-start {host.pool})"
            )
        free, total = available / 2**30, capacity / 2**30
        missing: list[BaseNeed] = []
        if need.images:
            names = session.call(
                "virStoragePoolListVolumes", lambda _c: handle.listVolumes(), pool=host.pool
            )
            missing = _missing(need.images, set(names))
        uploads = f"; {_uploads(missing)}" if missing else ""
        needed = need.disk_bytes + sum(b.size_bytes or 0 for b in missing)
        if available < needed:
            raise _Failed(
                f"pool {host.pool!r}: {free:.1f} GiB free of {total:.1f} GiB, needs "
                f"{needed / 2**30:.1f} GiB for one VM of {need.what}"
                + (" and the base images it lacks" if missing else "")
                + uploads
            )
        return f"pool {host.pool!r} active, {free:.1f} GiB free of {total:.1f} GiB{uploads}"

    def network() -> str:
        kind, name = host.network.kind, host.network.name
        if kind == "network":
            net = session.call(
                "virNetworkLookupByName", lambda c: c.networkLookupByName(name), network=name
            )
            if not session.call("virNetworkIsActive", lambda _c: net.isActive(), network=name):
                raise _Failed(f"network {name!r} exists but is not active (virsh net-start {name})")
            return f"network {name!r} active"
        try:
            iface = session.call(
                "virInterfaceLookupByName", lambda c: c.interfaceLookupByName(name), bridge=name
            )
        except PermanentError as exc:
            if exc.code == libvirt.VIR_ERR_NO_INTERFACE:
                raise _Failed(f"bridge {name!r} does not exist on the host") from exc
            if exc.code == libvirt.VIR_ERR_NO_SUPPORT:
                return bridge_from_sysfs(session, name) + bridge_mac_note(session, name)
            raise
        active = session.call("virInterfaceIsActive", lambda _c: iface.isActive(), bridge=name)
        if not active:
            # Guests can attach to it; it only carries traffic once a port is up.
            return f"bridge {name!r} present, link down (no port up yet?)"
        return f"bridge {name!r} up" + bridge_mac_note(session, name)

    def firmware() -> str:
        xml = session.call(
            "virConnectGetDomainCapabilities",
            lambda c: c.getDomainCapabilities(None, "x86_64", "q35", host.domain_type.value, 0),
        )
        session.trace("virConnectGetDomainCapabilities", "domain capabilities", xml)
        root = ET.fromstring(xml)
        kinds = {v.text for v in root.iterfind("os/enum[@name='firmware']/value")}
        loaders = [v.text or "" for v in root.iterfind("os/loader/value")]
        if "efi" not in kinds and not loaders:
            if need_uefi:
                raise _Failed(f"no UEFI firmware for {host.domain_type.value}/q35: install ovmf")
            return "no UEFI firmware (no uefi image needs it)"
        return f"UEFI available ({', '.join(loaders) or 'efi'})"

    def capacity() -> str:
        info = session.call("virNodeGetInfo", lambda c: c.getInfo())
        free = session.call("virNodeGetFreeMemory", lambda c: c.getFreeMemory())
        facts.update(cpus=int(info[2]), memory=int(info[1]), free_memory=int(free) // 2**20)
        text = f"{info[2]} CPUs, {info[1]} MiB memory ({facts['free_memory']} MiB free)"
        if facts["free_memory"] < need.memory_mib:
            raise _Failed(f"{text}: needs {need.memory_mib} MiB free for one VM of {need.what}")
        return text

    for name, check in (
        ("libvirt", versions),
        ("pool", pool),
        ("network", network),
        ("firmware", firmware),
        ("capacity", capacity),
    ):
        run(name, check)
    if kvm_probe:
        say(f"booting the KVM probe guest, up to {PROBE_TIMEOUT:.0f} s")
        item, facts["kvm"] = kvm_item(session, images)
    else:
        item = CheckItem("kvm", True, "not probed (--no-kvm-probe)")
    items.append(item)
    return HostReport(
        host=host.name,
        items=tuple(items),
        libvirt_version=facts.get("libvirt", ""),
        qemu_version=facts.get("qemu", ""),
        cpus=facts.get("cpus", 0),
        memory_mib=facts.get("memory", 0),
        free_memory_mib=facts.get("free_memory", 0),
        pool_free_bytes=facts.get("pool_free", 0),
        kvm_usable=facts.get("kvm"),
    )


TCG = "this host runs domainType: qemu (TCG), which does not need it"


def kvm_item(session: LibvirtSession, images: BaseImages) -> tuple[CheckItem, bool | None]:
    """The probe's verdict as a check item: a KVM that does not work, or a probe that could
    not decide, fails the check only where the host's ``domainType`` asks for KVM; on a
    ``qemu`` (TCG) host the line is information."""
    wants_kvm = session.host.domain_type is DomainType.KVM
    try:
        verdict = probe_kvm(session, images)
    except HostError as exc:
        if wants_kvm:
            return CheckItem("kvm", False, f"KVM probe failed: {exc}"), None
        return CheckItem("kvm", True, f"not decided: KVM probe failed: {exc}; {TCG}"), None
    if verdict.usable:
        return CheckItem("kvm", True, f"usable: {verdict.detail}"), True
    if wants_kvm:
        advice = "domainType: kvm guests will not run here (domainType: qemu does, slowly)"
    else:
        advice = TCG
    return CheckItem("kvm", not wants_kvm, f"not usable: {verdict.detail}; {advice}"), False


NO_INTERFACE_DRIVER = (
    "install libvirt's interface driver (Debian 13 and recent Ubuntu: "
    "libvirt-daemon-driver-interface; Debian 12: part of libvirt-daemon) "
    "or let the SSH user run test"
)


def bridge_from_sysfs(session: LibvirtSession, name: str) -> str:
    """A bridge checked without libvirt's interface driver (on Debian 13 only a Recommends):
    /sys/class/net/<name>/bridge exists on the host for a bridge, and only for one."""
    found = session.test_path("-d", f"/sys/class/net/{name}/bridge")
    if found is None:
        raise _Failed(
            f"bridge {name!r} cannot be checked: libvirt has no interface driver here and the "
            f"host did not answer test -d /sys/class/net/{name}/bridge; {NO_INTERFACE_DRIVER}"
        )
    if not found:
        raise _Failed(
            f"bridge {name!r} does not exist on the host (no /sys/class/net/{name}/bridge)"
        )
    return f"bridge {name!r} present (seen in /sys/class/net; libvirt has no interface driver)"


TAP_MAC_PREFIX = "fe:"
"""libvirt gives a guest's tap the guest's MAC with the first byte ``fe``."""
ADDR_SET = "3"
"""``/sys/class/net/<dev>/addr_assign_type`` of an address set by hand (NET_ADDR_SET)."""


def bridge_mac_note(session: LibvirtSession, name: str) -> str:
    """A warning to append when the bridge's MAC is a guest's tap's ("" otherwise, or when
    the host does not say). A bridge whose MAC was not set takes its lowest port's; with
    no physical port that is a guest's tap, and when that guest goes the MAC changes and
    the kernel flushes the bridge's ARP table: a proxy without the guest agent then has no
    known address (docs/hosts.md 6) until it next sends something. Passes: it works."""
    address = session.read_host_file(f"/sys/class/net/{name}/address", limit=64)
    mac = (address or "").strip().lower()
    if not mac.startswith(TAP_MAC_PREFIX):  # the usual case: one read, no second
        return ""
    assign = session.read_host_file(f"/sys/class/net/{name}/addr_assign_type", limit=16)
    if assign is None or assign.strip() == ADDR_SET:
        return ""
    return (
        f"; its MAC {mac} is a guest's tap's (none set, no physical port): when that guest "
        "goes the bridge's MAC changes and the kernel empties its ARP table, and a proxy "
        "without the guest agent has no known address until it next sends; set one "
        f"(ip link set {name} address 02:...) or give the bridge its physical port"
    )


class _Failed(Exception):
    """A check found something wrong that is not a libvirt error."""
