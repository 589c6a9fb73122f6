"""Domain and volume XML: parsed back, and checked against libvirt's own schema."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import replace
from pathlib import Path

import pytest

from reconciler.core.render.domainxml import domain_xml, overlay_volume_xml, plain_volume_xml
from reconciler.core.render.metadata import owner_from_domain_xml
from reconciler.errors import PermanentError
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

DISK = "/var/lib/libvirt/images/pf-lab-edge-1-01234567.qcow2"
SEED = "/var/lib/libvirt/images/pf-lab-edge-1-01234567-seed.iso"
BRIDGE = HostNetwork("bridge", "br0")


def make_spec(
    *,
    firmware: Firmware = Firmware.UEFI,
    cpu_mode: str = "host-model",
    network: HostNetwork = BRIDGE,
    domain_type: DomainType = DomainType.KVM,
) -> VmSpec:
    host = Host(
        name="hv1",
        address="10.0.0.1",
        zone="a",
        network=network,
        cpu_mode=cpu_mode,
        domain_type=domain_type,
    )
    return VmSpec(
        domain="pf-lab-edge-1-01234567",
        proxy="edge-1",
        host=host,
        image=Image(key="debian-12", url="https://example.org/d.qcow2", firmware=firmware),
        machine_type=MachineType(key="small", vcpus=2, memory_mib=1536, disk_gib=10),
        cloud_init=CloudInit(user_data="#cloud-config\n"),
        install_guest_agent=True,
        owner=Owner(fleet="lab", proxy="edge-1", digest="01234567deadbeef", image_key="debian-12"),
    )


def parse(spec: VmSpec) -> ET.Element:
    return ET.fromstring(domain_xml(spec, disk_path=DISK, seed_path=SEED))


def test_disks_are_referenced_by_host_path_never_by_pool_or_volume() -> None:
    xml = domain_xml(make_spec(), disk_path=DISK, seed_path=SEED)
    root = ET.fromstring(xml)
    disks = root.findall("./devices/disk")
    assert [d.get("type") for d in disks] == ["file", "file"]
    assert [d.find("source").get("file") for d in disks] == [DISK, SEED]  # type: ignore[union-attr]
    for element in root.iter():
        assert "pool" not in element.attrib, element.tag
        assert "volume" not in element.attrib, element.tag
        assert element.get("type") != "volume", element.tag
    assert "pool" not in xml and "volume" not in xml


def test_overlay_is_a_virtio_qcow2_disk_and_seed_a_readonly_sata_cdrom() -> None:
    disk, seed = parse(make_spec()).findall("./devices/disk")
    assert disk.get("device") == "disk"
    assert disk.find("driver").get("type") == "qcow2"  # type: ignore[union-attr]
    assert disk.find("target").attrib == {"dev": "vda", "bus": "virtio"}  # type: ignore[union-attr]
    assert seed.get("device") == "cdrom"
    assert seed.find("target").get("bus") == "sata"  # type: ignore[union-attr]
    assert seed.find("readonly") is not None


def test_uefi_selects_efi_firmware_with_secure_boot_off() -> None:
    os_element = parse(make_spec(firmware=Firmware.UEFI)).find("os")
    assert os_element is not None
    assert os_element.get("firmware") == "efi"
    assert os_element.find("type").get("machine") == "q35"  # type: ignore[union-attr]
    features = {f.get("name"): f.get("enabled") for f in os_element.findall("./firmware/feature")}
    assert features == {"secure-boot": "no", "enrolled-keys": "no"}
    # No loader and no nvram: libvirt chooses the OVMF binary and manages the
    # NVRAM file. libvirt 9.0 rejects <loader secure=...> next to firmware="efi".
    assert os_element.find("loader") is None
    assert os_element.find("nvram") is None


def test_bios_has_no_firmware_attribute_and_no_loader() -> None:
    os_element = parse(make_spec(firmware=Firmware.BIOS)).find("os")
    assert os_element is not None
    assert os_element.get("firmware") is None
    assert os_element.find("loader") is None
    assert os_element.find("firmware") is None
    assert os_element.find("type").get("machine") == "q35"  # type: ignore[union-attr]


@pytest.mark.parametrize("firmware", list(Firmware))
def test_acpi_is_on_for_both_firmwares(firmware: Firmware) -> None:
    assert parse(make_spec(firmware=firmware)).find("./features/acpi") is not None


def test_cpu_mode_none_writes_no_cpu_element() -> None:
    assert parse(make_spec(cpu_mode="none")).find("cpu") is None


@pytest.mark.parametrize("mode", ["host-model", "host-passthrough"])
def test_host_cpu_modes_are_passed_through(mode: str) -> None:
    cpu = parse(make_spec(cpu_mode=mode)).find("cpu")
    assert cpu is not None and cpu.attrib == {"mode": mode}
    assert cpu.find("model") is None


def test_a_named_cpu_model_becomes_a_custom_cpu() -> None:
    cpu = parse(make_spec(cpu_mode="Haswell-noTSX")).find("cpu")
    assert cpu is not None and cpu.get("mode") == "custom"
    assert cpu.findtext("model") == "Haswell-noTSX"


@pytest.mark.parametrize("domain_type", list(DomainType))
def test_domain_type_comes_from_the_host(domain_type: DomainType) -> None:
    assert parse(make_spec(domain_type=domain_type)).get("type") == domain_type.value


def test_vcpus_and_memory_come_from_the_machine_type() -> None:
    root = parse(make_spec())
    assert root.findtext("vcpu") == "2"
    memory = root.find("memory")
    assert memory is not None and memory.get("unit") == "MiB" and memory.text == "1536"


def test_nic_is_virtio_on_the_hosts_bridge() -> None:
    interface = parse(make_spec()).find("./devices/interface")
    assert interface is not None and interface.get("type") == "bridge"
    assert interface.find("source").attrib == {"bridge": "br0"}  # type: ignore[union-attr]
    assert interface.find("model").get("type") == "virtio"  # type: ignore[union-attr]


def test_nic_is_virtio_on_the_hosts_network() -> None:
    spec = make_spec(network=HostNetwork("network", "default"))
    interface = parse(spec).find("./devices/interface")
    assert interface is not None and interface.get("type") == "network"
    assert interface.find("source").attrib == {"network": "default"}  # type: ignore[union-attr]


def test_an_unknown_network_kind_is_a_permanent_error_naming_the_host() -> None:
    with pytest.raises(PermanentError, match="hv1"):
        parse(make_spec(network=HostNetwork("macvtap", "eth0")))


def test_serial_console_guest_agent_channel_balloon_and_rng_are_present() -> None:
    devices = parse(make_spec()).find("devices")
    assert devices is not None
    assert devices.find("serial").get("type") == "pty"  # type: ignore[union-attr]
    console = devices.find("console")
    assert console is not None and console.get("type") == "pty"
    assert console.find("target").get("type") == "serial"  # type: ignore[union-attr]
    channel = devices.find("channel")
    assert channel is not None and channel.get("type") == "unix"
    target = channel.find("target")
    assert target is not None
    assert target.attrib == {"type": "virtio", "name": "org.qemu.guest_agent.0"}
    assert devices.find("memballoon").get("model") == "virtio"  # type: ignore[union-attr]
    assert devices.find("rng").get("model") == "virtio"  # type: ignore[union-attr]


def test_ownership_metadata_is_embedded_and_parses_back() -> None:
    spec = make_spec()
    xml = domain_xml(spec, disk_path=DISK, seed_path=SEED)
    assert owner_from_domain_xml(xml) == spec.owner
    metadata = ET.fromstring(xml).find("metadata")
    assert metadata is not None and len(metadata) == 1
    assert metadata[0].tag == "{urn:proxyfleet:instance:v1}instance"


def test_the_namespace_is_declared_on_the_metadata_element_not_the_domain() -> None:
    xml = domain_xml(make_spec(), disk_path=DISK, seed_path=SEED)
    first_line = xml.splitlines()[0]
    assert "xmlns" not in first_line
    assert '<proxyfleet:instance xmlns:proxyfleet="urn:proxyfleet:instance:v1">' in xml


def test_names_and_paths_with_xml_specials_are_escaped() -> None:
    spec = replace(make_spec(), domain="a&b<c>")
    root = ET.fromstring(domain_xml(spec, disk_path="/p/x&y'z\".qcow2", seed_path=SEED))
    assert root.findtext("name") == "a&b<c>"
    assert root.find("./devices/disk/source").get("file") == "/p/x&y'z\".qcow2"  # type: ignore[union-attr]


def test_overlay_volume_is_qcow2_backed_by_the_base_path() -> None:
    volume = ET.fromstring(
        overlay_volume_xml(
            "pf.qcow2", capacity_gib=10, base_path="/pool/base-d.qcow2", base_format="raw"
        )
    )
    assert volume.findtext("name") == "pf.qcow2"
    assert volume.find("capacity").attrib == {"unit": "GiB"}  # type: ignore[union-attr]
    assert volume.findtext("capacity") == "10"
    assert volume.find("./target/format").get("type") == "qcow2"  # type: ignore[union-attr]
    assert volume.findtext("./backingStore/path") == "/pool/base-d.qcow2"
    assert volume.find("./backingStore/format").get("type") == "raw"  # type: ignore[union-attr]


def test_plain_volume_has_exact_byte_capacity_and_format() -> None:
    volume = ET.fromstring(plain_volume_xml("seed.iso", capacity_bytes=374784, fmt="iso"))
    assert volume.findtext("capacity") == "374784"
    assert volume.find("capacity").get("unit") == "bytes"  # type: ignore[union-attr]
    assert volume.find("./target/format").get("type") == "iso"  # type: ignore[union-attr]
    assert volume.find("backingStore") is None


# libvirt-clients ships virt-xml-validate (it needs xmllint from libxml2-utils);
# both are in the Makefile's APT_PACKAGES, so a missing tool fails, never skips.
def _validate(tmp_path: Path, xml: str, schema: str) -> None:
    tool = shutil.which("virt-xml-validate")
    assert tool is not None, "virt-xml-validate missing: run `make deps` (libvirt-clients)"
    assert shutil.which("xmllint") is not None, "xmllint missing: run `make deps` (libxml2-utils)"
    path = tmp_path / f"{schema}.xml"
    path.write_text(xml)
    result = subprocess.run(
        [tool, str(path), schema], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("firmware", list(Firmware))
@pytest.mark.parametrize("cpu_mode", ["host-model", "none", "Skylake-Client"])
def test_domain_xml_validates_against_libvirts_schema(
    tmp_path: Path, firmware: Firmware, cpu_mode: str
) -> None:
    spec = make_spec(firmware=firmware, cpu_mode=cpu_mode)
    _validate(tmp_path, domain_xml(spec, disk_path=DISK, seed_path=SEED), "domain")


def test_network_attached_domain_xml_validates_against_libvirts_schema(tmp_path: Path) -> None:
    spec = make_spec(network=HostNetwork("network", "default"), domain_type=DomainType.QEMU)
    _validate(tmp_path, domain_xml(spec, disk_path=DISK, seed_path=SEED), "domain")


def test_volume_xml_validates_against_libvirts_schema(tmp_path: Path) -> None:
    overlay = overlay_volume_xml(
        "o.qcow2", capacity_gib=4, base_path="/p/b.qcow2", base_format="qcow2"
    )
    _validate(tmp_path, overlay, "storagevol")
    for fmt in ("raw", "iso", "qcow2"):
        _validate(
            tmp_path, plain_volume_xml(f"v.{fmt}", capacity_bytes=2048, fmt=fmt), "storagevol"
        )


def test_an_image_without_firmware_boots_uefi() -> None:
    # Debian 13 hangs in GRUB under SeaBIOS with a serial console and no video
    # device; the seed made UEFI the default for that reason.
    spec = replace(make_spec(), image=Image(key="d", url="https://example.org/d.qcow2"))
    assert parse(spec).find("os").get("firmware") == "efi"  # type: ignore[union-attr]
