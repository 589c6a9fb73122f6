"""Removing volumes nobody uses, after checking on the host: a VM's leftovers, an old base.

A create killed between its first volume and its define leaves
``<domain>.qcow2`` and/or ``<domain>-seed.iso`` in the pool. The planner
proposes a cleanup from the inventory; this module confirms on the host, right
before deleting, what the inventory only suggested: the names are the
domain's own, and no domain on the host (owned or foreign, running or not)
has a disk that names one of them, by path or by pool and volume, backing
chains included.

The same check, with backing chains followed through the volumes' own XML
(a shut-off domain's definition does not list them), guards the removal of a
base image that the planner found unused (``remove_unused_base``), together
with the pool's volumes that back onto it: a base in use is kept without an
error, since the plan only saw names.
"""

from __future__ import annotations

import logging
import os.path
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any

from reconciler.adapters.hypervisor.images.baseimage import BaseImages
from reconciler.adapters.hypervisor.images.volumes import xml_of
from reconciler.adapters.hypervisor.transport.libvirtrpc import LibvirtSession
from reconciler.errors import NotFoundError, PermanentError
from reconciler.model.vm import base_marker_name, is_base_volume, vm_volumes

log = logging.getLogger("reconciler.host")


def remove_unused(
    session: LibvirtSession, images: BaseImages, domain: str, volumes: tuple[str, ...]
) -> tuple[str, ...]:
    """Delete those of ``volumes`` that exist and no domain uses; return their names.

    The caller has checked that ``domain`` does not exist. Refuses
    (PermanentError, nothing deleted) a name that is not ``domain``'s overlay
    or seed, and volumes that a domain uses. Cost: 1 pool lookup, 2 RPCs per
    volume (lookup, path), 1 domain listing + 1 XML read per domain on the
    host, 1 delete per volume.
    """
    host = session.host
    strange = [v for v in volumes if v not in vm_volumes(domain)]
    if strange:
        raise PermanentError(
            f"refusing to remove {', '.join(strange)}: not a volume name of domain {domain}",
            host=host.name,
        )
    pool = images.pool()
    found = {name: v for name in volumes if (v := images.volume(pool, name)) is not None}
    paths = {name: images.path(volume, name) for name, volume in found.items()}
    users = _users(session, paths)
    if users:
        raise PermanentError(
            f"refusing to remove the volumes of domain {domain}: in use by {users}",
            host=host.name,
        )
    deleted = []
    for name, volume in found.items():
        if images.delete_found(volume, name):
            log.info("host %s: deleted unused volume %s", host.name, name)
            deleted.append(name)
    return tuple(deleted)


MAX_CHAIN = 16
"""Backing files followed from one disk before giving up (then the base counts as in use)."""


def remove_unused_base(session: LibvirtSession, images: BaseImages, base: str) -> tuple[str, ...]:
    """Delete base volume ``base`` and its marker unless a domain's disk chain names it, or
    a volume of the pool (an operator's copy, a create's leftover) backs onto it.

    Returns the names deleted, marker first (a base without its marker is never
    used for a new overlay); empty when a domain still uses the base, which is
    logged, not raised. Refuses (PermanentError) a name not shaped as a base.
    """
    host = session.host
    if not is_base_volume(base):
        raise PermanentError(f"refusing to remove {base}: not a base volume name", host=host.name)
    pool = images.pool()
    marker = base_marker_name(base)
    found = {name: v for name in (marker, base) if (v := images.volume(pool, name)) is not None}
    if base in found:
        path = images.path(found[base], base)
        users = _chain_users(session, images, pool, path, base)
        overlays = images.overlays_of(pool, path)
        if users or overlays:
            backed = f"volumes {', '.join(overlays)} back onto it" if overlays else ""
            why = "; ".join(w for w in (users, backed) if w)
            log.info("host %s: base image %s is still used (%s); kept", host.name, base, why)
            return ()
    deleted = []
    for name, volume in found.items():
        if images.delete_found(volume, name):
            log.info("host %s: deleted unused base volume %s", host.name, name)
            deleted.append(name)
    return tuple(deleted)


def _chain_users(
    session: LibvirtSession, images: BaseImages, pool: Any, base_path: str, base: str
) -> str:
    """The domains with a disk whose backing chain reaches ``base_path``, "" when none."""
    wanted = {os.path.normpath(base_path), base}
    backing: dict[str, str | None] = {}  # path -> its backing file, None: none or not a volume

    def lookup(source: str) -> Any | None:
        """The volume a disk source names: a path, or a volume name of the host's pool."""
        if not source.startswith("/"):
            return images.volume(pool, source)
        try:
            return session.call(
                "virStorageVolLookupByPath", lambda c: c.storageVolLookupByPath(source), path=source
            )
        except NotFoundError:
            return None

    domains: list[Any] = session.call("virConnectListAllDomains", lambda c: c.listAllDomains(0))
    users = []
    for dom in domains:
        name = dom.name()
        try:
            xml = session.call("virDomainGetXMLDesc", xml_of(dom), domain=name)
        except NotFoundError:
            continue
        for path in disk_sources(xml, pool=session.host.pool):
            if _reaches(session, lookup, path, wanted, backing):
                users.append(f"domain {name}")
                break
    return ", ".join(users)


def _reaches(
    session: LibvirtSession,
    lookup: Callable[[str], Any | None],
    path: str,
    wanted: set[str],
    backing: dict[str, str | None],
) -> bool:
    """True when ``path`` or a file down its backing chain is one of ``wanted``."""
    current: str | None = path
    for _ in range(MAX_CHAIN):
        if current is None:
            return False
        if current in wanted:
            return True
        if current not in backing:
            backing[current] = _backing_of(session, lookup, current)
        current = backing[current]
    return True  # a chain this long is not ours to judge: keep the base


def _backing_of(
    session: LibvirtSession, lookup: Callable[[str], Any | None], source: str
) -> str | None:
    """The backing file of the volume ``source`` names; None when it has none or is no volume."""
    try:
        volume = lookup(source)
        if volume is None:
            return None
        xml = session.call("virStorageVolGetXMLDesc", xml_of(volume), volume=source)
    except NotFoundError:
        return None
    found = ET.fromstring(xml).findtext("backingStore/path")
    return os.path.normpath(found) if found else None


def _users(session: LibvirtSession, paths: dict[str, str]) -> str:
    """The domains whose disks use any of ``paths`` (volume name -> path), "" when none."""
    if not paths:
        return ""
    wanted = {os.path.normpath(p) for p in paths.values()} | set(paths)
    domains: list[Any] = session.call("virConnectListAllDomains", lambda c: c.listAllDomains(0))
    users = []
    for dom in domains:
        name = dom.name()
        try:
            xml = session.call("virDomainGetXMLDesc", xml_of(dom), domain=name)
        except NotFoundError:
            continue
        used = disk_sources(xml, pool=session.host.pool) & wanted
        if used:
            users.append(f"domain {name} ({', '.join(sorted(used))})")
    return "; ".join(users)


def disk_sources(xml: str, *, pool: str) -> set[str]:
    """What a domain's disks name: every file or device path (normalised), backing chains
    included, and the volume name of each disk that names a volume of ``pool``."""
    used: set[str] = set()
    for disk in ET.fromstring(xml).iter("disk"):
        for source in disk.iter("source"):
            for attr in ("file", "dev"):
                value = source.get(attr)
                if value:
                    used.add(os.path.normpath(value))
            volume = source.get("volume")
            if volume and source.get("pool") == pool:
                used.add(volume)
    return used
