"""A create killed before its define leaves volumes; the next cycle removes them, and only them.

Against a real libvirtd through sshd. The volumes are made as
``LibvirtHost.create`` makes them (an overlay on the base image, then the
seed) for the domain the plan names, and the domain is never defined: what a
SIGKILL between the first volume and ``virDomainDefineXML`` leaves.
"""

from __future__ import annotations

import contextlib
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest
from hostservices import BlankImage
from test_engine_libvirt import engine, fleet_yaml, proxy_yaml

from reconciler.core.render.domainxml import overlay_volume_xml
from reconciler.engine.reconcile import Engine, Prepared
from reconciler.model import ActionKind, Host
from reconciler.model.plan import Create
from reconciler.model.report import ActionResult, RunResult
from reconciler.model.vm import base_volume_name, vm_volumes

__all__ = ["engine"]  # the fixture, shared with test_engine_libvirt


def base_of(blank: BlankImage) -> str:
    """The base volume of fleet_yaml's image ``blank``: named by its content."""
    return f"base-blank-{blank.sha256[:12]}.qcow2"


@pytest.fixture
def pool_handle(local_conn: Any, host: Host) -> Iterator[Any]:
    """The test pool; volumes not named pf-eng-* or base-* that a test made are removed after."""
    handle = local_conn.storagePoolLookupByName(host.pool)
    yield handle
    handle.refresh(0)
    for volume in handle.listAllVolumes(0):
        if volume.name().startswith("keep-"):
            with contextlib.suppress(libvirt.libvirtError):
                volume.delete(0)


def volume_names(pool: Any) -> set[str]:
    pool.refresh(0)
    return {v.name() for v in pool.listAllVolumes(0)}


def leave_volumes_of_a_killed_create(pool: Any, prepared: Prepared, proxy: str) -> str:
    """The overlay (on the base) and seed of ``proxy``'s planned create; no domain."""
    (create,) = [a for a in prepared.plan.actions if a.proxy == proxy]
    assert isinstance(create, Create) and create.domain
    overlay, seed = vm_volumes(create.domain)
    base_path = pool.storageVolLookupByName(base_volume_name(create.vm.image)).path()
    pool.createXML(
        overlay_volume_xml(overlay, capacity_gib=1, base_path=base_path, base_format="qcow2"), 0
    )
    pool.createXML(raw_volume_xml(seed), 0)
    return create.domain


def raw_volume_xml(name: str) -> str:
    volume = ET.Element("volume", {"type": "file"})
    ET.SubElement(volume, "name").text = name
    ET.SubElement(volume, "capacity", {"unit": "KiB"}).text = "64"
    ET.SubElement(ET.SubElement(volume, "target"), "format", {"type": "raw"})
    return ET.tostring(volume, encoding="unicode")


def disk_domain_xml(name: str, path: str) -> str:
    """A foreign, never started domain whose disk is ``path``."""
    dom = ET.Element("domain", {"type": "qemu"})
    ET.SubElement(dom, "name").text = name
    ET.SubElement(dom, "memory", {"unit": "MiB"}).text = "64"
    ET.SubElement(ET.SubElement(dom, "os"), "type", {"arch": "x86_64"}).text = "hvm"
    disk = ET.SubElement(ET.SubElement(dom, "devices"), "disk", {"type": "file", "device": "disk"})
    ET.SubElement(disk, "driver", {"name": "qemu", "type": "qcow2"})
    ET.SubElement(disk, "source", {"file": path})
    ET.SubElement(disk, "target", {"dev": "vda", "bus": "virtio"})
    return ET.tostring(dom, encoding="unicode")


def start_fleet(eng: Engine, root: Path, host: Host, blank: BlankImage, cleanup: list[str]) -> str:
    """A fleet with web-1 running (the base image uploaded); returns web-1's domain."""
    (root / "fleet.yaml").write_text(fleet_yaml(host, blank))
    (root / "web-1.yaml").write_text(proxy_yaml("web-1", "one"))
    first = eng.reconcile_once(root, revision="r1")
    cleanup.extend(o.action.domain or "" for o in first.outcomes)
    assert [o.result for o in first.outcomes] == [ActionResult.SUCCEEDED]
    return first.outcomes[0].action.domain or ""


def test_volumes_a_killed_create_left_are_removed_when_the_manifest_no_longer_has_its_proxy(
    engine: tuple[Engine, list[str]],
    host: Host,
    blank_image: BlankImage,
    local_conn: Any,
    pool_handle: Any,
    tmp_path: Path,
    cleanup_domains: list[str],
) -> None:
    eng, rpcs = engine
    web1 = start_fleet(eng, tmp_path, host, blank_image, cleanup_domains)
    (tmp_path / "gone.yaml").write_text(proxy_yaml("gone-1", "gone"))
    prepared = eng.prepare(tmp_path, revision="r2")
    assert isinstance(prepared, Prepared)
    killed = leave_volumes_of_a_killed_create(pool_handle, prepared, "gone-1")
    pool_handle.createXML(raw_volume_xml("keep-notes.qcow2"), 0)
    (tmp_path / "gone.yaml").unlink()
    rpcs.clear()

    report = eng.reconcile_once(tmp_path, revision="r3")

    assert [(o.action.kind, o.action.domain, o.result) for o in report.outcomes] == [
        (ActionKind.CLEANUP, killed, ActionResult.SUCCEEDED)
    ]
    left = volume_names(pool_handle)
    assert not left & set(vm_volumes(killed))
    assert {base_of(blank_image), "keep-notes.qcow2", *vm_volumes(web1)} <= left
    assert [d.name() for d in local_conn.listAllDomains(0) if d.name() == web1] == [web1]
    assert rpcs.count("virStorageVolDelete") == 2
    assert rpcs.count("virStoragePoolListAllVolumes") == 1
    print(f"cleanup cycle RPCs: {sorted(set(rpcs))}")
    rpcs.clear()
    assert eng.reconcile_once(tmp_path, revision="r3").outcomes == ()
    assert "virStorageVolDelete" not in rpcs


def test_a_volume_a_foreign_domain_uses_is_never_removed_though_it_is_named_as_ours(
    engine: tuple[Engine, list[str]],
    host: Host,
    blank_image: BlankImage,
    local_conn: Any,
    pool_handle: Any,
    tmp_path: Path,
    cleanup_domains: list[str],
) -> None:
    eng, _ = engine
    start_fleet(eng, tmp_path, host, blank_image, cleanup_domains)
    (tmp_path / "gone.yaml").write_text(proxy_yaml("gone-2", "gone"))
    prepared = eng.prepare(tmp_path, revision="r2")
    assert isinstance(prepared, Prepared)
    killed = leave_volumes_of_a_killed_create(pool_handle, prepared, "gone-2")
    overlay = pool_handle.storageVolLookupByName(vm_volumes(killed)[0])
    cleanup_domains.append("keep-rescue")
    local_conn.defineXML(disk_domain_xml("keep-rescue", overlay.path()))
    (tmp_path / "gone.yaml").unlink()

    report = eng.reconcile_once(tmp_path, revision="r3")

    (outcome,) = report.outcomes
    assert (outcome.action.kind, outcome.result) == (ActionKind.CLEANUP, ActionResult.FAILED)
    assert "in use by domain keep-rescue" in outcome.error
    assert set(vm_volumes(killed)) <= volume_names(pool_handle)
    assert report.result is RunResult.PARTIAL
    local_conn.lookupByName("keep-rescue").undefine()
    retried = eng.reconcile_once(tmp_path, revision="r3")
    assert [o.result for o in retried.outcomes] == [ActionResult.SUCCEEDED]
    assert not volume_names(pool_handle) & set(vm_volumes(killed))
