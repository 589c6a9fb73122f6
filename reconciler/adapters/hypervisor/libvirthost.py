"""``LibvirtHost``: the Hypervisor seam over SSH and libvirt-python.

What lands on a host, per proxy VM (DESIGN.md): domain ``pf-<fleet>-<proxy>-<d8>``
with the ownership element in its ``<metadata>``, overlay ``<domain>.qcow2`` on
the base named by content (``base-<key>-<sha256[:12]>.<format>``), seed
``<domain>-seed.iso``, and the NVRAM file that libvirt manages for UEFI guests.
Disks are referenced by host path (``virStorageVolGetPath``), never by
pool/volume, so AppArmor-confined QEMU gets rules for them.

Costs are libvirt calls over the SSH link; every one is traced at DEBUG on
``reconciler.libvirt`` (see libvirtrpc). Cloud-init content only ever travels
inside the seed ISO upload body, which is never logged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libvirt

from reconciler.adapters.hypervisor.hostcheck.check import check_host
from reconciler.adapters.hypervisor.images.baseimage import BaseImages, FileOpener
from reconciler.adapters.hypervisor.images.unusedvolumes import remove_unused, remove_unused_base
from reconciler.adapters.hypervisor.images.volumes import xml_of
from reconciler.adapters.hypervisor.observe.addresses import domain_addresses
from reconciler.adapters.hypervisor.observe.hostobserve import observe_host
from reconciler.adapters.hypervisor.transport.libvirterrors import NO_SPACE
from reconciler.adapters.hypervisor.transport.libvirtrpc import LibvirtSession, RpcObserver
from reconciler.core.render.domainxml import domain_xml, overlay_volume_xml
from reconciler.core.render.metadata import (
    NAMESPACE,
    PREFIX,
    owner_from_domain_xml,
    owner_xml,
)
from reconciler.core.render.seediso import seed_iso
from reconciler.errors import HostError, NotFoundError, PermanentError, TransientError
from reconciler.model import Host, HostInventory, Image, Owner
from reconciler.model.hostcheck import HostReport, Need
from reconciler.model.settings import SshSettings
from reconciler.model.vm import VmSpec, vm_volumes

log = logging.getLogger("reconciler.host")

UNDEFINE_FLAGS = (
    libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE
    | libvirt.VIR_DOMAIN_UNDEFINE_SNAPSHOTS_METADATA
    | libvirt.VIR_DOMAIN_UNDEFINE_CHECKPOINTS_METADATA
)
REFUSED_FLAG_CODES = frozenset(
    {libvirt.VIR_ERR_NO_SUPPORT, libvirt.VIR_ERR_INVALID_ARG, libvirt.VIR_ERR_ARGUMENT_UNSUPPORTED}
)


class LibvirtHost:
    """One hypervisor from fleet.yaml, reached over SSH. Safe to share between threads."""

    def __init__(
        self,
        host: Host,
        settings: SshSettings,
        *,
        observer: RpcObserver | None = None,
        opener: FileOpener | None = None,
        fleet: str | None = None,
        watch: bool = False,
    ) -> None:
        """``fleet``: when set, ``delete`` refuses a domain another fleet owns (the
        last-moment check of the pinned fleet id). ``watch``: owners are kept between
        observes and read again when libvirt's domain events say they changed (the daemon;
        reconciler.adapters.hypervisor.transport.ownerwatch)."""
        self._host = host
        self._fleet = fleet
        self._session = LibvirtSession(host, settings, observer=observer, watch=watch)
        self._images = BaseImages(self._session, opener=opener)

    @property
    def name(self) -> str:
        return self._host.name

    @property
    def session(self) -> LibvirtSession:
        return self._session

    def dial_ahead(self) -> None:
        self._session.dial_ahead()

    def observe(self) -> HostInventory:
        """The pool's volumes and space, the node's size and every domain with its owner
        (cost and order: ``hostobserve.observe_host``)."""
        return observe_host(self._session, self._images, self._host)

    def ensure_image(self, image: Image, local_file: Path) -> None:
        try:
            self._images.ensure(image, local_file)
        except PermanentError as exc:
            if NO_SPACE not in str(exc):
                raise
            raise PermanentError(
                f"pool {self._host.pool} on {self.name} is full "
                f"({self._pool_free_text()} free) uploading image {image.key}: {exc}",
                host=self.name,
                rpc=exc.rpc,
            ) from exc

    def _pool_free_text(self) -> str:
        try:
            pool = self._images.pool()
            info = self._session.call("virStoragePoolGetInfo", lambda _c: pool.info())
        except HostError:
            return "unknown space"
        return f"{int(info[3]) / 2**30:.1f} GiB"

    def create(self, spec: VmSpec) -> None:
        """Idempotent: an existing domain is only started; overlay reused, seed rebuilt."""
        existing = self._lookup(spec.domain)
        if existing is not None:
            self._start(existing, spec.domain)
            return
        images = self._images
        pool = images.pool()
        base_path = images.verified_path(pool, spec.image, expected=spec.image.sha256)
        xml = overlay_volume_xml(
            spec.overlay_name,
            capacity_gib=spec.machine_type.disk_gib,
            base_path=base_path,
            base_format=spec.image.format.value,
        )
        self._session.trace("virStorageVolCreateXML", "volume XML", xml, volume=spec.overlay_name)
        # Created first; an overlay left by a create that failed half-way is reused.
        overlay = images.create_volume(pool, spec.overlay_name, xml) or images.volume(
            pool, spec.overlay_name
        )
        if overlay is None:
            raise TransientError(
                f"overlay {spec.overlay_name} existed and then vanished", host=self.name
            )
        seed = images.write(pool, spec.seed_name, seed_iso(spec))
        xml = domain_xml(
            spec,
            disk_path=images.file_path(overlay, spec.overlay_name),
            seed_path=images.file_path(seed, spec.seed_name),
        )
        self._session.trace("virDomainDefineXML", "domain XML", xml, domain=spec.domain)
        dom = self._session.call(
            "virDomainDefineXML", lambda c: c.defineXML(xml), domain=spec.domain
        )
        self._session.owner_changed(dom.UUIDString())  # a new UUID, unless defined over one
        self._boot(dom, spec.domain)  # just defined, so shut off: no state to read first

    def start(self, domain: str) -> None:
        dom = self._lookup(domain)
        if dom is None:
            raise NotFoundError(
                f"domain {domain} does not exist", host=self.name, rpc="virDomainLookupByName"
            )
        self._start(dom, domain)

    def set_owner(self, domain: str, owner: Owner) -> None:
        """Rewrite the ownership element with ``virDomainSetMetadata``: persistent, and live too
        while the domain runs. Only for a domain whose element already names the same
        fleet, proxy and digest (PermanentError otherwise).

        A domain that starts between the state check and the write may have
        been started from the definition before it, so the live one is written
        again; one that stops in between has only the persistent one left.
        """
        dom = self._lookup(domain)
        if dom is None:
            raise NotFoundError(
                f"domain {domain} does not exist", host=self.name, rpc="virDomainLookupByName"
            )
        xml = self._session.call("virDomainGetXMLDesc", xml_of(dom), domain=domain)
        current = owner_from_domain_xml(xml)
        if current is None or _identity(current) != _identity(owner):
            why = (
                "it carries no proxyfleet metadata"
                if current is None
                else f"its metadata names {'/'.join(_identity(current))}"
            )
            raise PermanentError(
                f"refusing to rewrite the owner of domain {domain}: {why}", host=self.name
            )
        text = owner_xml(owner)
        self._session.trace("virDomainSetMetadata", "owner", text, domain=domain)
        active = self._active(dom, domain)
        self._set_metadata(dom, domain, text, live=active)
        if not active and self._active(dom, domain):
            self._set_metadata(dom, domain, text, live=True)
        log.info(
            "host %s: domain %s records protect=%s",
            self.name,
            domain,
            "true" if owner.protect else "false",
        )

    def delete(self, domain: str) -> None:
        """Destroy, undefine (NVRAM, managed save), remove overlay and seed. Gone already: fine.

        Refuses a domain without proxyfleet metadata: foreign domains are never touched.
        Runs on a lane of the session (a connection beside the one other actions use), so
        that more deletes than libvirtd serves on one connection run at once.
        """
        with self._session.lane():
            dom = self._lookup(domain)
            if dom is not None:
                self._remove_domain(dom, domain)
            pool = self._images.pool()
            for volume in vm_volumes(domain):
                if self._images.delete_volume(pool, volume):
                    log.info("host %s: deleted volume %s", self.name, volume)

    def remove_volumes(self, domain: str, volumes: tuple[str, ...]) -> tuple[str, ...]:
        """Delete ``volumes`` of ``domain``, a domain that must not exist; returns those deleted.

        Confirmed on the host right before deleting (``images.unusedvolumes``):
        only ``domain``'s overlay and seed names are accepted, no domain of that
        name exists, and no domain's disk points at any of the volumes. Any
        doubt is a PermanentError and nothing is deleted. A volume already gone
        is skipped. Cost: 1 lookup, then see ``remove_unused``.
        """
        if self._lookup(domain) is not None:
            raise PermanentError(
                f"refusing to remove the volumes of domain {domain}: the domain exists",
                host=self.name,
            )
        return remove_unused(self._session, self._images, domain, volumes)

    def remove_unused_base(self, base: str) -> tuple[str, ...]:
        """Delete ``base`` and its marker unless a domain's disk chain names it
        (reconciler.adapters.hypervisor.images.unusedvolumes); empty when it is still in use."""
        return remove_unused_base(self._session, self._images, base)

    def addresses(self, domain: str) -> tuple[str, ...]:
        """Guest agent first, then DHCP leases, then ARP: the first source with an IPv4 wins."""
        dom = self._lookup(domain)
        if dom is None:
            raise NotFoundError(
                f"domain {domain} does not exist", host=self.name, rpc="virDomainLookupByName"
            )
        return domain_addresses(self._session, dom, domain)

    def host_check(
        self,
        *,
        need_uefi: bool = True,
        need: Need | None = None,
        kvm_probe: bool = True,
        say: Callable[[str], None] = lambda _text: None,
    ) -> HostReport:
        """Readiness and capacity for ``proxyfleet hosts check``; never raises HostError.
        ``kvm_probe`` boots a throw-away guest to see whether KVM works (seconds); ``say``
        hears what the check waits for next."""
        return check_host(
            self._session,
            self._images,
            need_uefi=need_uefi,
            need=need or Need(),
            kvm_probe=kvm_probe,
            say=say,
        )

    def close(self) -> None:
        self._session.close()

    def _lookup(self, domain: str) -> Any | None:
        try:
            return self._session.call(
                "virDomainLookupByName", lambda c: c.lookupByName(domain), domain=domain
            )
        except NotFoundError:
            return None

    def _active(self, dom: Any, domain: str) -> bool:
        return bool(
            self._session.call("virDomainIsActive", lambda _c: dom.isActive(), domain=domain)
        )

    def _set_metadata(self, dom: Any, domain: str, text: str, *, live: bool) -> None:
        flags = libvirt.VIR_DOMAIN_AFFECT_CONFIG
        if live:
            flags |= libvirt.VIR_DOMAIN_AFFECT_LIVE
        try:
            self._session.call(
                "virDomainSetMetadata",
                _owner_metadata(dom, text, flags),
                domain=domain,
                flags=flags,
            )
        except PermanentError as exc:
            if not live or exc.code != libvirt.VIR_ERR_OPERATION_INVALID:
                raise
            log.info(
                "host %s: domain %s stopped meanwhile; writing its definition", self.name, domain
            )
            self._set_metadata(dom, domain, text, live=False)
        finally:  # written or perhaps written: not waiting for its event
            self._session.owner_changed(dom.UUIDString())

    def _start(self, dom: Any, domain: str) -> None:
        state, _reason = self._session.call(
            "virDomainGetState", lambda _c: dom.state(), domain=domain
        )
        if state == libvirt.VIR_DOMAIN_PAUSED:  # paused by the hypervisor (I/O error): resume
            self._session.call("virDomainResume", lambda _c: dom.resume(), domain=domain)
            log.info("host %s: resumed paused domain %s", self.name, domain)
            return
        if state == libvirt.VIR_DOMAIN_CRASHED:  # kept by on_crash=preserve: destroy, then start
            self._session.call("virDomainDestroy", lambda _c: dom.destroy(), domain=domain)
            log.info("host %s: destroyed crashed domain %s before starting it", self.name, domain)
        elif state != libvirt.VIR_DOMAIN_SHUTOFF:
            return
        self._boot(dom, domain)

    def _boot(self, dom: Any, domain: str) -> None:
        self._session.call("virDomainCreate", lambda _c: dom.create(), domain=domain)
        log.info("host %s: started domain %s", self.name, domain)

    def _remove_domain(self, dom: Any, domain: str) -> None:
        try:
            xml = self._session.call("virDomainGetXMLDesc", xml_of(dom), domain=domain)
            owner = owner_from_domain_xml(xml)
            if owner is None:
                raise PermanentError(
                    f"refusing to delete domain {domain}: it carries no proxyfleet metadata",
                    host=self.name,
                )
            if self._fleet is not None and owner.fleet != self._fleet:
                raise PermanentError(
                    f"refusing to delete domain {domain}: it belongs to fleet {owner.fleet!r}, "
                    f"not {self._fleet!r}",
                    host=self.name,
                )
            if self._session.call("virDomainIsActive", lambda _c: dom.isActive(), domain=domain):
                self._tolerate_gone(
                    lambda: self._session.call(
                        "virDomainDestroy", lambda _c: dom.destroy(), domain=domain
                    )
                )
            self._undefine(dom, domain)
        except NotFoundError:
            log.debug("host %s: domain %s vanished while deleting", self.name, domain)
            return
        log.info("host %s: deleted domain %s", self.name, domain)

    def _undefine(self, dom: Any, domain: str) -> None:
        """With NVRAM removal; drivers that refuse the flag get the plainer forms."""
        attempts = (UNDEFINE_FLAGS | libvirt.VIR_DOMAIN_UNDEFINE_NVRAM, UNDEFINE_FLAGS, 0)
        for flags in attempts:
            try:
                self._session.call(
                    "virDomainUndefineFlags",
                    _undefine_flags(dom, flags),
                    domain=domain,
                    flags=flags,
                )
                return
            except PermanentError as exc:
                if exc.code not in REFUSED_FLAG_CODES or flags == 0:
                    raise
                log.info(
                    "host %s: undefine flags %#x refused (%s); trying fewer",
                    self.name,
                    flags,
                    exc.code_name,
                )

    def _tolerate_gone(self, action: Any) -> None:
        """Destroying a domain that stopped meanwhile is fine."""
        try:
            action()
        except PermanentError as exc:
            if exc.code != libvirt.VIR_ERR_OPERATION_INVALID:
                raise


def _owner_metadata(dom: Any, text: str, flags: int) -> Callable[[Any], None]:
    """The bare element: libvirt adds the namespace (PREFIX, NAMESPACE) itself."""

    def call(_conn: Any) -> None:
        dom.setMetadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, text, PREFIX, NAMESPACE, flags)

    return call


def _identity(owner: Owner) -> tuple[str, str, str]:
    """What makes a VM this VM: a relabel may change anything else, never these."""
    return (owner.fleet, owner.proxy, owner.digest)


def _undefine_flags(dom: Any, flags: int) -> Callable[[Any], None]:
    def call(_conn: Any) -> None:
        dom.undefineFlags(flags)

    return call
