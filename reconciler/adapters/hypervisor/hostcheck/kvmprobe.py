"""Is KVM usable on a host? Boot the probe guest and watch it (``proxyfleet hosts check`` only).

First the cheap part: libvirt's domain capabilities for the ``kvm`` type (no
``/dev/kvm``, or no access to it, ends there). Then the part that tells:
``core.render.kvmguest``'s boot sector is written into the host's pool as
``proxyfleet-kvm-probe.img`` (1 MiB), a transient domain
``proxyfleet-kvm-probe`` of type kvm boots it under SeaBIOS, and the probe
reads the guest's progress marker with ``virDomainMemoryPeek`` every half
second until the guest reaches long mode (usable), QEMU pauses it (the "KVM
internal error" of nested virtualization: not usable, with the stage it
reached), it ends (QEMU died), or the deadline passes (``PROBE_TIMEOUT``, 45 s for
the create and the watch together: not usable, too slow).

The probe leaves nothing behind: the domain is destroyed (being transient, it
is gone then) and the volume deleted, in ``finally``; libvirt's own QEMU log
``proxyfleet-kvm-probe.log`` stays, one file overwritten by every probe, and
holds QEMU's register dump when KVM failed. It never touches another domain:
a leftover probe from an interrupted check is destroyed only if its XML
carries the probe's metadata element; a foreign domain of that name stops the
probe instead. It is not part of a reconcile.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import libvirt

from reconciler.core.render.domainxml import cpu_element
from reconciler.core.render.kvmguest import (
    DISK_IMAGE,
    MARKER_ADDRESS,
    MARKER_SIZE,
    PROBE_DOMAIN,
    PROBE_VOLUME,
    STAGE_TEXT,
    KvmVerdict,
    Stage,
    is_probe_xml,
    probe_domain_xml,
    stage_of,
)
from reconciler.errors import NotFoundError, PermanentError

if TYPE_CHECKING:
    from reconciler.adapters.hypervisor.images.baseimage import BaseImages
    from reconciler.adapters.hypervisor.transport.libvirtrpc import LibvirtSession

log = logging.getLogger("reconciler.host")

PROBE_TIMEOUT = 45.0
"""Seconds the whole probe may take: libvirt's answer to the create, then the guest's way to
long mode. With working KVM it needs about one; on the lab machines (nested, no unrestricted
guest) SeaBIOS alone takes ~30 s under KVM before the boot sector runs, and the guest then
fails within a second. A create that libvirt has not answered by then (seen on a TCG host
through SSH: no answer in 60 s) is "not decided", never a wait of minutes."""
POLL = 0.5
PAUSED_REASONS = {
    getattr(libvirt, name): name.removeprefix("VIR_DOMAIN_PAUSED_").lower().replace("_", " ")
    for name in dir(libvirt)
    if name.startswith("VIR_DOMAIN_PAUSED_")
}
GONE = frozenset({libvirt.VIR_ERR_OPERATION_INVALID, libvirt.VIR_ERR_NO_DOMAIN})
"""What libvirt answers about a transient domain that has just ended."""


def probe_kvm(
    session: LibvirtSession,
    images: BaseImages,
    *,
    timeout: float = PROBE_TIMEOUT,
    domain_type: str = "kvm",
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> KvmVerdict:
    """The verdict for the session's host; HostError when the host cannot be asked.
    ``domain_type`` ``qemu`` runs the same guest under TCG (tests: it must get through)."""
    refused = _kvm_refused(session, domain_type)
    if refused:
        return KvmVerdict(False, f"libvirt offers no {domain_type} domain type: {refused}")
    if not _clear_leftover(session):
        return KvmVerdict(
            False, f"not probed: a domain named {PROBE_DOMAIN} exists and is not a probe's"
        )
    try:
        volume = images.write(images.pool(), PROBE_VOLUME, DISK_IMAGE)
        path = images.path(volume, PROBE_VOLUME)
        cpu = cpu_element(session.host.cpu_mode)
        xml = probe_domain_xml(disk_path=path, cpu=cpu, domain_type=domain_type)
        session.trace("virDomainCreateXML", "probe domain XML", xml, domain=PROBE_DOMAIN)
        began = clock()
        try:
            with session.rpc("virDomainCreateXML", domain=PROBE_DOMAIN) as (conn, deadline):
                deadline.seconds = min(deadline.seconds, timeout)  # the probe's, when shorter
                deadline.arm()
                dom = conn.createXML(xml, 0)
        except PermanentError as exc:
            return KvmVerdict(False, f"the probe guest did not start: {exc}")
        left = max(timeout - (clock() - began), POLL)
        return _watch(session, dom, timeout=left, clock=clock, sleep=sleep, domain_type=domain_type)
    finally:
        _remove(session, images)


def _remove(session: LibvirtSession, images: BaseImages) -> None:
    """Destroy the probe domain and delete its volume, both looked up by name: a call that
    timed out dropped the connection and the handles with it. The volume goes last, so that
    a create libvirt finishes after its call timed out fails on the missing disk; should it
    still start, the next check's leftover sweep ends it."""
    _clear_leftover(session)
    images.delete_volume(images.pool(), PROBE_VOLUME)


def _kvm_refused(session: LibvirtSession, domain_type: str) -> str:
    """libvirt's reason when it does not offer the domain type on q35, else ''."""
    try:
        session.call(
            "virConnectGetDomainCapabilities",
            lambda c: c.getDomainCapabilities(None, "x86_64", "q35", domain_type, 0),
        )
    except PermanentError as exc:
        return str(exc)
    return ""


def _watch(
    session: LibvirtSession,
    dom: Any,
    *,
    timeout: float,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    domain_type: str,
) -> KvmVerdict:
    started = clock()
    stage = Stage.FIRMWARE
    while True:
        elapsed = clock() - started
        try:
            state, reason = session.call(
                "virDomainGetState", lambda _c: dom.state(0), domain=PROBE_DOMAIN
            )
            stage = max(stage, _stage(session, dom))
        except (NotFoundError, PermanentError) as exc:
            if isinstance(exc, PermanentError) and exc.code not in GONE:
                raise
            return KvmVerdict(
                False,
                f"the probe guest ended {elapsed:.0f} s after start ({STAGE_TEXT[stage]}): "
                "QEMU stopped under KVM; see the host's libvirt QEMU log "
                f"{PROBE_DOMAIN}.log",
                elapsed,
            )
        if stage is Stage.LONG_MODE:
            return KvmVerdict(
                True,
                f"a BIOS guest booted under {domain_type} to 64-bit long mode in {elapsed:.1f} s",
                elapsed,
            )
        if state == libvirt.VIR_DOMAIN_PAUSED:
            why = PAUSED_REASONS.get(reason, str(reason))
            return KvmVerdict(
                False,
                f"KVM stopped the probe guest {elapsed:.0f} s after start (paused, reason {why}) "
                f"once {STAGE_TEXT[stage]}: KVM cannot emulate what a boot needs here (nested "
                "virtualization without unrestricted guest?); QEMU logged a 'KVM internal "
                f"error' in {PROBE_DOMAIN}.log",
                elapsed,
            )
        if elapsed >= timeout:
            return KvmVerdict(
                False,
                f"the probe guest had not reached long mode {timeout:.0f} s after start "
                f"({STAGE_TEXT[stage]}): KVM is far too slow here",
                elapsed,
            )
        sleep(POLL)


def _stage(session: LibvirtSession, dom: Any) -> Stage:
    marker = session.call(
        "virDomainMemoryPeek",
        lambda _c: dom.memoryPeek(MARKER_ADDRESS, MARKER_SIZE, libvirt.VIR_MEMORY_PHYSICAL),
        domain=PROBE_DOMAIN,
    )
    return stage_of(bytes(marker))


def _destroy(session: LibvirtSession, dom: Any) -> None:
    try:
        session.call("virDomainDestroy", lambda _c: dom.destroy(), domain=PROBE_DOMAIN)
    except NotFoundError:
        return
    except PermanentError as exc:
        if exc.code not in GONE:
            raise


def _clear_leftover(session: LibvirtSession) -> bool:
    """Destroy a probe an interrupted check left running; False if the name is taken by a
    domain that is not a probe (it is left alone)."""
    try:
        dom = session.call(
            "virDomainLookupByName", lambda c: c.lookupByName(PROBE_DOMAIN), domain=PROBE_DOMAIN
        )
    except NotFoundError:
        return True
    xml = session.call("virDomainGetXMLDesc", lambda _c: dom.XMLDesc(0), domain=PROBE_DOMAIN)
    if not is_probe_xml(xml):
        return False
    log.info("host %s: destroying a KVM probe left by an interrupted check", session.host.name)
    _destroy(session, dom)
    try:
        session.call(
            "virDomainLookupByName", lambda c: c.lookupByName(PROBE_DOMAIN), domain=PROBE_DOMAIN
        )
    except NotFoundError:
        return True
    return False
