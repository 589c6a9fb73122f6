"""Step 3 of a cycle: read every host, in parallel, within a deadline.

A host that raises, or has not answered when the deadline passes, is
*unreachable*: its VMs are unknown, never absent, so the planner neither
creates their proxies elsewhere nor forgets them. Each host is read on a
daemon thread so that a hung host cannot hold the cycle (or the process) past
the deadline; the adapter's own call deadline ends the thread later.

``size_bases`` then adds what placement needs from the management box: the
size of each base image some host lacks (``core.capacity.unsized_bases``),
from the image cache or the image's source, so that the plan counts an upload
where the base is missing. A size nobody can tell stays unknown, and the plan
says so; nothing is downloaded before the plan.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from reconciler.core.plan.capacity import unsized_bases
from reconciler.errors import HostError
from reconciler.model import Fleet, HostInventory, HostState, Inventory, Repo
from reconciler.model.inventory import BaseSize
from reconciler.model.report import HostStatus
from reconciler.model.vm import base_volume_name
from reconciler.ports.hypervisor import Hypervisor
from reconciler.ports.images import ImageSizes

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Observation:
    """The inventory the planner reads, and each host's status for the report."""

    inventory: Inventory
    hosts: tuple[HostStatus, ...]
    fleet: str = ""
    """The fleet observed (``metadata.name``): its VMs are the owned ones."""


def observe(
    fleet: Fleet,
    hypervisors: Mapping[str, Hypervisor],
    *,
    timeout: float,
) -> Observation:
    """Observe every host of ``fleet`` (those without a hypervisor count as unreachable).

    ``timeout`` is real seconds for the whole observation, not per host.
    """
    results: dict[str, HostInventory] = {}
    lock = threading.Lock()

    def read(name: str, hypervisor: Hypervisor) -> None:
        inventory = _read_one(name, hypervisor)
        with lock:
            results[name] = inventory

    threads = []
    for host in fleet.hosts:
        hypervisor = hypervisors.get(host.name)
        if hypervisor is None:
            continue
        thread = threading.Thread(
            target=read, args=(host.name, hypervisor), name=f"observe-{host.name}", daemon=True
        )
        thread.start()
        threads.append(thread)
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))

    inventories = []
    with lock:
        for host in fleet.hosts:
            found = results.get(host.name)
            if found is None:
                why = (
                    f"no answer within {timeout:g} s"
                    if host.name in hypervisors
                    else "no connection configured"
                )
                log.warning("Host %s counts as unreachable: %s.", host.name, why)
                found = HostInventory(name=host.name, reachable=False, error=why)
            inventories.append(found)
    statuses = tuple(_status(fleet, inv) for inv in inventories)
    return Observation(
        inventory=Inventory(hosts=tuple(inventories)), hosts=statuses, fleet=fleet.name
    )


def size_bases(repo: Repo, observation: Observation, images: ImageSizes) -> Observation:
    """``observation`` with the size of every base a plan may upload and the inventory does
    not size yet. Cost: nothing while every host holds its bases; else per such image a
    stat of the cache, or one HEAD request."""
    inventory = observation.inventory
    sizes = list(inventory.base_sizes)
    for image in unsized_bases(repo, inventory):
        size = images.size(image)
        if size is None:
            log.warning(
                "Image %s: its size is not known before the download; hosts without its "
                "base are judged on the disk alone.",
                image.key,
            )
            continue
        sizes.append(BaseSize(base_volume_name(image), size))
    if len(sizes) == len(inventory.base_sizes):
        return observation
    sized = Inventory(hosts=inventory.hosts, base_sizes=tuple(sizes))
    return Observation(inventory=sized, hosts=observation.hosts, fleet=observation.fleet)


def _read_one(name: str, hypervisor: Hypervisor) -> HostInventory:
    try:
        found = hypervisor.observe()
    except Exception as exc:  # any failure means "unknown", never "empty"
        error = str(exc) or type(exc).__name__
        if isinstance(exc, HostError):
            log.warning("Host %s is unreachable: %s", name, error)
        else:
            error = f"{type(exc).__name__}: {exc}"
            log.error("Reading host %s failed unexpectedly: %s", name, error, exc_info=True)
        return HostInventory(name=name, reachable=False, error=error)
    if not found.reachable:
        return HostInventory(name=name, reachable=False, error=found.error or "unreachable")
    return HostInventory(
        name=name,
        reachable=True,
        domains=found.domains,
        volumes=found.volumes,
        capacity=found.capacity,
    )


def _status(fleet: Fleet, inventory: HostInventory) -> HostStatus:
    host = fleet.host(inventory.name)
    owned = sum(1 for d in inventory.domains if d.owner is not None and d.owner.fleet == fleet.name)
    return HostStatus(
        name=inventory.name,
        reachable=inventory.reachable,
        error=inventory.error or "",
        zone=host.zone if host is not None else "",
        owned=owned,
        foreign=len(inventory.domains) - owned,
        state=host.state if host is not None else HostState.ACTIVE,
    )
