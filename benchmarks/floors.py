"""Rows 2 and 2c's physical floors: the least any tool must do over libvirt to create
and to delete the same VMs.

Create, per VM, the libvirt calls a create cannot do without, on the connection
proxyfleet itself dialled (the same SSH-forwarded libvirt socket), as many
VMs at once as proxyfleet's ``concurrency.perHost``:

1. ``virStorageVolCreateXML`` of the qcow2 overlay on the base image;
2. ``virStorageVolCreateXML`` of the seed ISO's volume, then
   ``virStorageVolUpload`` of the ISO's bytes (one stream);
3. ``virDomainDefineXML``;
4. ``virDomainCreate``.

Plus one ``virStoragePoolLookupByName`` per run. What is rendered (overlay
and domain XML, the seed ISO) is proxyfleet's own, byte for byte
(``benchmarks.specs``), and prepared before the clock starts: the floor is
what crosses the socket and what libvirtd and QEMU do, not Python's rendering.
The floor's domains are named ``fl-<proxy>`` (proxyfleet's own are
``pf-<fleet>-<proxy>-<d8>``).

Delete, per VM, as many at once, on as many connections as proxyfleet's lanes
(``lanes_for``: up to 5 deletes on each, libvirtd's calls per client; each its own
SSH-forwarded libvirt socket): ``virDomainLookupByName``,
``virDomainDestroy``, ``virDomainUndefineFlags`` (NVRAM too), then for the overlay and
the seed ``virStorageVolLookupByName`` and ``virStorageVolDelete``; plus one
``virStoragePoolLookupByName`` per run.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import libvirt

from reconciler.adapters.hypervisor.transport.lanes import CALLS_PER_LANE
from reconciler.core.render.domainxml import domain_xml, overlay_volume_xml, plain_volume_xml
from reconciler.core.render.seediso import seed_iso
from reconciler.model.vm import VmSpec

PREFIX = "fl-"
CHUNK = 256 * 1024
"""Upload chunk: libvirt's stream buffer, as proxyfleet sends."""


@dataclass(frozen=True)
class FloorVm:
    """One VM, rendered: what the floor sends."""

    domain: str
    overlay: str
    overlay_xml: str
    seed: str
    seed_xml: str
    seed_iso: bytes
    domain_xml: str


def floor_name(proxy: str, _digest: str) -> str:
    return f"{PREFIX}{proxy}"


def floor_vms(specs: Iterable[VmSpec], *, pool_dir: str, base_path: str) -> list[FloorVm]:
    """Render every spec (named ``fl-<proxy>``, see ``floor_name``) for the floor."""
    vms = []
    for spec in specs:
        iso = seed_iso(spec)
        vms.append(
            FloorVm(
                domain=spec.domain,
                overlay=spec.overlay_name,
                overlay_xml=overlay_volume_xml(
                    spec.overlay_name,
                    capacity_gib=spec.machine_type.disk_gib,
                    base_path=base_path,
                    base_format=spec.image.format.value,
                ),
                seed=spec.seed_name,
                seed_xml=plain_volume_xml(spec.seed_name, capacity_bytes=len(iso), fmt="raw"),
                seed_iso=iso,
                domain_xml=domain_xml(
                    spec,
                    disk_path=f"{pool_dir}/{spec.overlay_name}",
                    seed_path=f"{pool_dir}/{spec.seed_name}",
                ),
            )
        )
    return vms


def create_one(conn: Any, pool: Any, vm: FloorVm) -> None:
    pool.createXML(vm.overlay_xml, 0)
    seed = pool.createXML(vm.seed_xml, 0)
    stream = conn.newStream(0)
    seed.upload(stream, 0, len(vm.seed_iso), 0)
    offset = 0
    while offset < len(vm.seed_iso):
        offset += stream.send(vm.seed_iso[offset : offset + CHUNK])
    stream.finish()
    conn.defineXML(vm.domain_xml).create()


def create_all(conn: Any, pool_name: str, vms: list[FloorVm], *, width: int) -> None:
    """Every VM, ``width`` at a time on the one connection (a queue, as the executor's)."""
    pool = conn.storagePoolLookupByName(pool_name)
    each(vms, width, lambda vm, _thread: create_one(conn, pool, vm))


def delete_one(conn: Any, pool: Any, vm: FloorVm) -> None:
    dom = conn.lookupByName(vm.domain)
    dom.destroy()
    dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
    for volume in (vm.overlay, vm.seed):
        pool.storageVolLookupByName(volume).delete(0)


def lanes_for(width: int) -> int:
    """Connections ``width`` deletes at once take: as proxyfleet's lanes, at most
    ``CALLS_PER_LANE`` (libvirtd's calls per client) on each."""
    return max(1, -(-width // CALLS_PER_LANE))


def delete_all(conns: list[Any], pool_name: str, vms: list[FloorVm], *, width: int) -> None:
    """Destroy, undefine and remove the volumes of every VM, ``width`` at a time; thread
    ``i`` calls over ``conns[i % len(conns)]`` (``lanes_for(width)`` of them)."""
    pools = [conn.storagePoolLookupByName(pool_name) for conn in conns]
    each(
        vms,
        width,
        lambda vm, i: delete_one(conns[i % len(conns)], pools[i % len(conns)], vm),
    )


def each(vms: list[FloorVm], width: int, fn: Callable[[FloorVm, int], None]) -> None:
    """``fn(vm, thread)`` for every VM on ``width`` threads taking them from one queue."""
    queue = deque(vms)
    lock = threading.Lock()

    def work(thread: int) -> None:
        while True:
            with lock:
                if not queue:
                    return
                vm = queue.popleft()
            fn(vm, thread)

    with ThreadPoolExecutor(width, thread_name_prefix="floor") as workers:
        for future in [workers.submit(work, i) for i in range(min(width, len(vms)))]:
            future.result()
