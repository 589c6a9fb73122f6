"""Removing the volumes of a VM that never got its domain, after checking nobody uses them.

A create killed between its first volume and its define leaves
``<domain>.qcow2`` and/or ``<domain>-seed.iso`` in the pool. The planner
proposes a cleanup from the inventory; this module confirms on the host, right
before deleting, what the inventory only suggested: the names are the
domain's own, and no domain on the host (owned or foreign, running or not)
has a disk that names one of them, by path or by pool and volume, backing
chains included.
"""

from __future__ import annotations

import logging
import os.path
import xml.etree.ElementTree as ET
from typing import Any

from reconciler.adapters.baseimage import BaseImages, xml_of
from reconciler.adapters.libvirtrpc import LibvirtSession
from reconciler.errors import NotFoundError, PermanentError
from reconciler.model.vm import vm_volumes

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
