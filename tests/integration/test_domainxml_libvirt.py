"""Domain XML, ownership metadata and seed ISO as a real libvirtd takes them.

virt-xml-validate accepted ``<loader secure="no"/>`` next to
``firmware="efi"``; libvirt 9.0 refused the same XML at define time. Only a
real libvirtd catches that class of bug, so the XML is defined (and a UEFI
guest started under TCG) here, through a direct local connection.
"""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest

from reconciler.core.render.domainxml import domain_xml
from reconciler.core.render.metadata import (
    NAMESPACE,
    PREFIX,
    owner_from_domain_xml,
    owner_xml,
    parse_owner,
)
from reconciler.core.render.seediso import seed_iso
from reconciler.model import (
    CloudInit,
    DomainType,
    Firmware,
    Host,
    HostNetwork,
    Image,
    MachineType,
    Owner,
)
from reconciler.model.vm import VmSpec


def make_spec(network: str, firmware: Firmware, name: str) -> VmSpec:
    return VmSpec(
        domain=name,
        proxy="xml",
        host=Host(
            name="local",
            address="127.0.0.1",
            zone="z",
            network=HostNetwork("network", network),
            domain_type=DomainType.QEMU,
            cpu_mode="none",
        ),
        image=Image(key="blank", url="file:///dev/null", firmware=firmware),
        machine_type=MachineType(key="tiny", vcpus=1, memory_mib=128, disk_gib=1),
        cloud_init=CloudInit(user_data="#cloud-config\n{}\n"),
        install_guest_agent=True,
        owner=Owner(fleet="it-xml", proxy="xml", digest="d" * 16, image_key="blank", protect=True),
    )


@pytest.fixture
def domains(local_conn: Any) -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        try:
            dom = local_conn.lookupByName(name)
        except libvirt.libvirtError:
            continue
        if dom.isActive():
            try:
                dom.destroy()
            except libvirt.libvirtError:
                if dom.isActive():
                    raise
        dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)


@pytest.fixture
def files(pool: tuple[str, Path]) -> Iterator[tuple[Path, Path]]:
    directory = pool[1]
    disk, seed = directory / "xml-test.qcow2", directory / "xml-test-seed.iso"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(disk), "64M"], check=True)
    yield disk, seed
    disk.unlink(missing_ok=True)
    seed.unlink(missing_ok=True)


@pytest.mark.parametrize("firmware", list(Firmware))
def test_libvirt_defines_both_firmwares_and_keeps_the_ownership_metadata(
    local_conn: Any, network: str, domains: list[str], firmware: Firmware
) -> None:
    spec = make_spec(network, firmware, f"pf-it-xml-{firmware.value}")
    domains.append(spec.domain)
    dom = local_conn.defineXML(
        domain_xml(spec, disk_path="/var/tmp/none.qcow2", seed_path="/var/tmp/none.iso")
    )
    stored = dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)
    assert owner_from_domain_xml(stored) == spec.owner
    assert (
        parse_owner(dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NAMESPACE, 0)) == spec.owner
    )
    root = ET.fromstring(stored)
    assert [d.get("type") for d in root.findall("./devices/disk")] == ["file", "file"]
    assert (root.find("os").get("firmware") == "efi") is (firmware is Firmware.UEFI)  # type: ignore[union-attr]


def test_set_metadata_takes_the_bare_element_and_reads_back_by_local_name(
    local_conn: Any, network: str, domains: list[str]
) -> None:
    spec = make_spec(network, Firmware.BIOS, "pf-it-xml-setmeta")
    domains.append(spec.domain)
    dom = local_conn.defineXML(domain_xml(spec, disk_path="/var/tmp/a", seed_path="/var/tmp/b"))
    newer = Owner(fleet="it-xml", proxy="xml", digest="e" * 16, revision="1" * 40)
    dom.setMetadata(
        libvirt.VIR_DOMAIN_METADATA_ELEMENT,
        owner_xml(newer),
        PREFIX,
        NAMESPACE,
        libvirt.VIR_DOMAIN_AFFECT_CONFIG,
    )
    assert parse_owner(dom.metadata(libvirt.VIR_DOMAIN_METADATA_ELEMENT, NAMESPACE, 0)) == newer
    assert owner_from_domain_xml(dom.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE)) == newer


def test_a_uefi_guest_starts_under_tcg_with_secure_boot_off_and_the_seed_attached(
    local_conn: Any, network: str, domains: list[str], files: tuple[Path, Path]
) -> None:
    disk, seed = files
    spec = make_spec(network, Firmware.UEFI, "pf-it-xml-start")
    seed.write_bytes(seed_iso(spec))
    domains.append(spec.domain)
    dom = local_conn.defineXML(domain_xml(spec, disk_path=str(disk), seed_path=str(seed)))
    dom.create()
    assert dom.isActive()
    live = ET.fromstring(dom.XMLDesc(0))
    loader = live.find("./os/loader")
    assert loader is not None and loader.text
    # libvirt picked a firmware build without secure boot and a varstore
    # without enrolled keys (Debian: OVMF_CODE_4M.fd / OVMF_VARS_4M.fd).
    assert loader.get("secure") != "yes"
    assert "secboot" not in loader.text and ".ms." not in loader.text
    template = live.find("./os/nvram")
    assert template is not None
    assert ".ms." not in (template.get("template") or "")
    assert "snakeoil" not in (template.get("template") or "")
    nvram = live.findtext("./os/nvram")
    assert nvram and Path(nvram).exists()
    sources = [s.get("file") for s in live.findall("./devices/disk/source")]
    assert sources == [str(disk), str(seed)]
    # the TCG translation cache placement counts is the one QEMU was given
    cache = live.find("./features/tcg/tb-cache")
    assert cache is not None and int(cache.text or 0) == 256 * 1024  # libvirt says KiB
    pid = Path(f"/run/libvirt/qemu/{spec.domain}.pid").read_text().strip()
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert any(b"tb-size=256" in arg for arg in argv), argv
    dom.destroy()
    dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
    assert not Path(nvram).exists()
