"""``observe`` over sshd against a real libvirtd: the pool's volume names, one domain
listing, one metadata read per domain.

The inventory of an idle host is what every reconcile pays for, so its cost is
pinned: the pool looked up, its volumes listed and its space read (3 RPCs, for the
leftovers of interrupted creates and for placement), the node's CPUs and memory
(1 RPC), ``virConnectGetAllDomainStats`` once, then
``virDomainGetMetadata`` once per domain (read several at a time), and nothing else.
"""

from __future__ import annotations

import secrets
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hostservices import BlankImage

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.core.render.domainxml import domain_xml
from reconciler.model import DomainState
from reconciler.model.vm import VmSpec

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def foreign_xml(name: str) -> str:
    return (
        f"<domain type='qemu'><name>{name}</name><memory unit='MiB'>64</memory>"
        "<os><type arch='x86_64'>hvm</type></os></domain>"
    )


def test_observe_reads_each_domain_once_by_its_metadata_and_finds_owned_and_foreign(
    make_host: Callable[..., LibvirtHost],
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
    pool: tuple[str, Any],
) -> None:
    marker = f"observe-{secrets.token_hex(3)}.img"
    volume_xml = (
        f"<volume><name>{marker}</name><capacity unit='KiB'>4</capacity>"
        "<target><format type='raw'/></target></volume>"
    )
    volume = local_conn.storagePoolLookupByName(pool[0]).createXML(volume_xml, 0)
    specs = [make_spec(f"observe-{i}", blank_image.image) for i in range(12)]
    for spec in specs:
        cleanup_domains.append(spec.domain)
        local_conn.defineXML(
            domain_xml(spec, disk_path="/nonexistent/disk.qcow2", seed_path="/nonexistent/seed.iso")
        )
    foreign = [f"pf-it-foreign-observe-{i}" for i in range(3)]
    for name in foreign:
        cleanup_domains.append(name)
        local_conn.defineXML(foreign_xml(name))
    calls: Counter[str] = Counter()
    adapter = make_host(observer=lambda rpc, _host, _seconds, _ok: calls.update([rpc]))

    try:
        inventory = adapter.observe()
    finally:
        volume.delete(0)

    seen = {d.name: d for d in inventory.domains}
    for spec in specs:
        assert seen[spec.domain].owner == spec.owner
        assert seen[spec.domain].state is DomainState.SHUTOFF
    for name in foreign:
        assert seen[name].owner is None
    assert marker in inventory.volumes
    capacity = inventory.capacity
    assert capacity is not None and capacity.cpus >= 1 and capacity.memory_mib > 0
    assert 0 < capacity.pool_available_bytes <= capacity.pool_capacity_bytes
    listed = len(inventory.domains)
    assert dict(calls) == {
        "virConnectOpen": 1,
        "virStoragePoolLookupByName": 1,
        "virStoragePoolRefresh": 1,
        "virStoragePoolListAllVolumes": 1,
        "virStoragePoolGetInfo": 1,
        "virNodeGetInfo": 1,
        "virConnectGetAllDomainStats": 1,
        "virDomainGetMetadata": listed,
    }
