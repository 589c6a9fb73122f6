"""Create, observe, start and delete VMs through sshd against a real libvirtd."""

from __future__ import annotations

import io
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import libvirt
import pycdlib
import pytest
from hostservices import BlankImage

from reconciler.adapters.hypervisor.hostcheck.check import version_text
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.core.render.domainxml import overlay_volume_xml
from reconciler.errors import NotFoundError, PermanentError
from reconciler.model import DomainState, Host, HostNetwork
from reconciler.model.vm import VmSpec, base_volume_name

# A pump or watchdog thread dying with an exception is a bug, not noise.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

NVRAM_DIR = Path("/var/lib/libvirt/qemu/nvram")


def volume_names(local_conn: Any, pool: str) -> set[str]:
    handle = local_conn.storagePoolLookupByName(pool)
    handle.refresh(0)
    return {v.name() for v in handle.listAllVolumes(0)}


def domain_names(local_conn: Any) -> set[str]:
    return {d.name() for d in local_conn.listAllDomains(0)}


def test_created_vm_runs_is_observed_as_owned_and_delete_leaves_nothing_behind(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    pool: tuple[str, Path],
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("web-1", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)

    adapter.create(spec)

    seen = {d.name: d for d in adapter.observe().domains}
    assert seen[spec.domain].state is DomainState.RUNNING
    assert seen[spec.domain].owner == spec.owner
    dom = local_conn.lookupByName(spec.domain)
    root = ET.fromstring(dom.XMLDesc(0))
    disks = root.findall("devices/disk")
    assert [d.get("type") for d in disks] == ["file", "file"]
    directory = pool[1]
    assert [d.find("source").get("file") for d in disks] == [
        str(directory / spec.overlay_name),
        str(directory / spec.seed_name),
    ]
    nvram = NVRAM_DIR / f"{spec.domain}_VARS.fd"
    assert nvram.exists(), "a UEFI guest gets an NVRAM file from libvirt"
    assert {spec.overlay_name, spec.seed_name} <= volume_names(local_conn, pool[0])

    adapter.delete(spec.domain)

    assert spec.domain not in domain_names(local_conn)
    assert not {spec.overlay_name, spec.seed_name} & volume_names(local_conn, pool[0])
    assert not nvram.exists()
    assert spec.domain not in {d.name for d in adapter.observe().domains}


def test_creating_twice_keeps_one_domain_and_the_overlay_and_restarts_a_stopped_one(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    pool: tuple[str, Path],
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("web-2", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    overlay = pool[1] / spec.overlay_name
    inode = overlay.stat().st_ino

    adapter.create(spec)
    local_conn.lookupByName(spec.domain).destroy()
    adapter.create(spec)

    matching = [n for n in domain_names(local_conn) if n == spec.domain]
    assert matching == [spec.domain]
    assert local_conn.lookupByName(spec.domain).isActive()
    assert overlay.stat().st_ino == inode
    adapter.delete(spec.domain)


def test_a_domain_defined_but_never_started_gets_started_by_create(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("web-3", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    local_conn.lookupByName(spec.domain).destroy()
    assert {d.name: d.state for d in adapter.observe().domains}[spec.domain] is DomainState.SHUTOFF

    adapter.start(spec.domain)

    assert {d.name: d.state for d in adapter.observe().domains}[spec.domain] is DomainState.RUNNING
    adapter.delete(spec.domain)


def test_a_foreign_domain_is_listed_without_owner_and_survives_delete_and_creates(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    network: str,
    cleanup_domains: list[str],
) -> None:
    foreign = "pf-it-foreign-00000000"
    cleanup_domains.append(foreign)
    xml = ET.Element("domain", {"type": "qemu"})
    ET.SubElement(xml, "name").text = foreign
    ET.SubElement(xml, "memory", {"unit": "MiB"}).text = "64"
    os_el = ET.SubElement(xml, "os")
    ET.SubElement(os_el, "type", {"arch": "x86_64", "machine": "q35"}).text = "hvm"
    local_conn.defineXML(ET.tostring(xml, encoding="unicode"))
    spec = make_spec("web-4", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)

    adapter.create(spec)
    with pytest.raises(PermanentError, match="no proxyfleet metadata"):
        adapter.delete(foreign)
    adapter.delete(spec.domain)

    seen = {d.name: d for d in adapter.observe().domains}
    assert seen[foreign].owner is None
    assert seen[foreign].state is DomainState.SHUTOFF
    assert foreign in domain_names(local_conn)


def test_deleting_what_is_already_gone_succeeds_and_starting_it_is_not_found(
    adapter: LibvirtHost,
) -> None:
    adapter.delete("pf-it-never-existed-12345678")
    with pytest.raises(NotFoundError):
        adapter.start("pf-it-never-existed-12345678")
    with pytest.raises(NotFoundError):
        adapter.addresses("pf-it-never-existed-12345678")


def test_delete_finishes_a_half_deleted_vm_whose_domain_is_already_undefined(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    pool: tuple[str, Path],
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("web-5", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    dom = local_conn.lookupByName(spec.domain)
    dom.destroy()
    dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)

    adapter.delete(spec.domain)

    assert not {spec.overlay_name, spec.seed_name} & volume_names(local_conn, pool[0])


def test_a_running_vm_without_guest_agent_or_lease_has_no_addresses_yet(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("web-6", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)

    assert adapter.addresses(spec.domain) == ()
    adapter.delete(spec.domain)


def test_a_running_vm_without_guest_agent_is_found_in_the_hosts_arp_table(
    adapter: LibvirtHost,
    local_conn: Any,
    network: str,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
) -> None:
    # A blank guest answers no ARP itself: the neighbour entry a real guest's traffic
    # would leave on the host's bridge is written by hand (reachable, as the kernel
    # records a guest that answered). libvirt's own ARP reader fails on kernels that
    # put NLMSG_DONE into the dump's last read (reconciler.adapters.hypervisor.observe.neighbours);
    # either way the address must come back.
    spec = make_spec("web-arp", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    bridge = local_conn.networkLookupByName(network).bridgeName()
    live = ET.fromstring(local_conn.lookupByName(spec.domain).XMLDesc(0))
    mac = live.find("./devices/interface/mac").get("address")  # type: ignore[union-attr]
    ip = "10.251.7.9"
    neigh = ["ip", "neigh", "replace", ip, "lladdr", mac, "dev", bridge, "nud", "reachable"]
    subprocess.run(neigh, check=True)
    try:
        assert adapter.addresses(spec.domain) == (ip,)
    finally:
        subprocess.run(["ip", "neigh", "del", ip, "dev", bridge], check=False)
    adapter.delete(spec.domain)


def test_host_check_reports_versions_pool_network_firmware_and_capacity(
    adapter: LibvirtHost, local_conn: Any
) -> None:
    report = adapter.host_check(kvm_probe=False)

    assert report.ok, report.items
    assert [i.name for i in report.items] == [
        "ssh",
        "libvirt",
        "pool",
        "network",
        "firmware",
        "capacity",
        "kvm",
    ]
    assert report.items[-1].detail == "not probed (--no-kvm-probe)"
    # The daemon's versions, as a direct connection reads them: the client library that
    # libvirt-python links may be older or newer than the host's libvirtd (issue 14).
    assert report.libvirt_version == version_text(local_conn.getLibVersion())
    assert report.qemu_version == version_text(local_conn.getVersion())
    assert report.cpus >= 1
    assert report.memory_mib > 0
    assert "streamlocal" in report.items[0].detail


def test_a_leftover_seed_from_an_interrupted_create_is_rebuilt(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    pool: tuple[str, Path],
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("web-7", blank_image.image, user_data="#cloud-config\nhostname: seven\n")
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    handle = local_conn.storagePoolLookupByName(pool[0])
    volume = ET.Element("volume")
    ET.SubElement(volume, "name").text = spec.seed_name
    ET.SubElement(volume, "capacity", {"unit": "bytes"}).text = "4096"
    handle.createXML(ET.tostring(volume, encoding="unicode"), 0)
    (pool[1] / spec.seed_name).write_bytes(b"truncated" * 100)

    adapter.create(spec)

    iso = pycdlib.PyCdlib()
    iso.open(str(pool[1] / spec.seed_name))
    out = io.BytesIO()
    iso.get_file_from_iso_fp(out, rr_path="/user-data")
    iso.close()
    assert out.getvalue() == b"#cloud-config\nhostname: seven\n"
    adapter.delete(spec.domain)


def test_an_overlay_left_by_an_interrupted_create_is_reused_and_the_disks_are_the_pools_files(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    pool: tuple[str, Path],
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("web-8", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    handle = local_conn.storagePoolLookupByName(pool[0])
    base = str(pool[1] / base_volume_name(spec.image))
    handle.createXML(
        overlay_volume_xml(
            spec.overlay_name, capacity_gib=1, base_path=base, base_format=spec.image.format.value
        ),
        0,
    )
    inode = (pool[1] / spec.overlay_name).stat().st_ino

    adapter.create(spec)

    assert (pool[1] / spec.overlay_name).stat().st_ino == inode
    xml = ET.fromstring(local_conn.lookupByName(spec.domain).XMLDesc(0))
    sources = {d.get("file") for d in xml.iterfind("devices/disk/source")}
    assert sources == {str(pool[1] / spec.overlay_name), str(pool[1] / spec.seed_name)}
    assert all(Path(s).is_file() for s in sources if s)
    adapter.delete(spec.domain)


def test_host_check_finds_an_existing_bridge_and_names_a_missing_one(
    make_host: Callable[..., LibvirtHost], host: Host, network: str, local_conn: Any
) -> None:
    bridge = local_conn.networkLookupByName(network).bridgeName()
    present = make_host(replace(host, network=HostNetwork("bridge", bridge)))
    missing = make_host(replace(host, network=HostNetwork("bridge", "nosuchbr0")))

    found = {i.name: i for i in present.host_check(kvm_probe=False).items}
    absent = {i.name: i for i in missing.host_check(kvm_probe=False).items}

    assert found["network"].ok, found["network"].detail
    assert bridge in found["network"].detail
    assert not absent["network"].ok
    assert "'nosuchbr0' does not exist" in absent["network"].detail


def test_a_host_pinned_to_a_fleet_refuses_to_delete_another_fleets_vm(
    adapter: LibvirtHost,
    make_host: Callable[..., LibvirtHost],
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("web-9", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    other = make_host(fleet="someone-else")
    with pytest.raises(PermanentError, match="belongs to fleet"):
        other.delete(spec.domain)
    assert spec.domain in domain_names(local_conn)
    make_host(fleet=spec.owner.fleet).delete(spec.domain)
    assert spec.domain not in domain_names(local_conn)
