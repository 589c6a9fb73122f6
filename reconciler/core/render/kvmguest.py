"""The KVM probe's guest: a boot sector, its domain XML, and what its progress means.

``/dev/kvm`` being there, and libvirt offering the ``kvm`` domain type, do not
mean a guest runs: under nested virtualization without "unrestricted guest"
KVM has to emulate parts of the mode switches a boot makes, and its emulator
gives up on some instructions ("KVM internal error. Suberror: 1 ... emulation
failure"). On the lab machines SeaBIOS itself runs, then SYSLINUX dies on an
``iret`` in protected mode; OVMF dies inside the firmware. Only starting
something tells.

So ``proxyfleet hosts check`` boots :data:`BOOT_SECTOR` (source:
``kvmguest_boot.S`` beside this file) under SeaBIOS in a throw-away transient
``kvm`` domain with no NIC. It makes the switches a BIOS guest makes (real
mode, protected mode with an ``iret`` there, long mode with paging) and writes
a marker to guest-physical :data:`MARKER_ADDRESS` after each step, which the
probe reads with ``virDomainMemoryPeek``. The stage it reached, and whether
QEMU paused it with an internal error, are the verdict.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass
from enum import IntEnum

PROBE_DOMAIN = "proxyfleet-kvm-probe"
"""One fixed name: at most one probe per host at a time, and a leftover is found by name."""
PROBE_VOLUME = "proxyfleet-kvm-probe.img"
PROBE_NAMESPACE = "urn:proxyfleet:kvm-probe:v1"
"""The probe domain's own metadata element: a leftover is destroyed only if it carries it."""
MARKER_ADDRESS = 0x500
MARKER_SIZE = 8
MEMORY_MIB = 32
DISK_BYTES = 1024 * 1024
"""SeaBIOS gives a disk smaller than one cylinder (16 heads x 63 sectors) 0 cylinders and
then cannot read its first sector ("Boot failed: could not read the boot disk")."""

_CODE = bytes.fromhex(
    "fa31c08ed88ec08ed0bc007c66c706000550564d3166c706040500000000660f0116007d0f20c06683c8010f"
    "22c066ea367c0000080066b810008ed88ec08ed08ee08ee8bc007c0000c7050005000050564d329c6a08685c"
    "7c0000cfc7050005000050564d33bf0010000031c0b9000c0000f3abc7050010000003200000c70500200000"
    "03300000c7050030000083000000b8001000000f22d80f20e083c8200f22e0b9800000c00f320d000100000f"
    "300f20c00d000000800f22c0eac37c00001800c704250005000050564d34c70425040500004f4b4f4bfaf4eb"
    "fc8d76000000000000000000ffff0000009acf00ffff00000092cf00ffff0000009aaf001f00e07c"
)
BOOT_SECTOR = _CODE.ljust(510, b"\0") + b"\x55\xaa"
"""``kvmguest_boot.S`` assembled (``as --32``, ``ld -Ttext 0x7c00 --oformat binary``)."""
DISK_IMAGE = BOOT_SECTOR.ljust(DISK_BYTES, b"\0")


class Stage(IntEnum):
    """How far the probe guest got; each marker is written once the step has worked."""

    FIRMWARE = 0
    REAL_MODE = 1
    PROTECTED_MODE = 2
    IRET = 3
    LONG_MODE = 4


STAGE_TEXT = {
    Stage.FIRMWARE: "SeaBIOS had not started the boot sector",
    Stage.REAL_MODE: "the boot sector ran in real mode",
    Stage.PROTECTED_MODE: "the boot sector entered 32-bit protected mode",
    Stage.IRET: "an iret in protected mode worked",
    Stage.LONG_MODE: "the guest reached 64-bit long mode with paging",
}
_MARKERS = {b"PVM" + str(int(stage)).encode(): stage for stage in Stage if stage}


def stage_of(marker: bytes) -> Stage:
    """The stage the 8 bytes at :data:`MARKER_ADDRESS` record (anything else: firmware)."""
    stage = _MARKERS.get(bytes(marker[:4]), Stage.FIRMWARE)
    if stage is Stage.LONG_MODE and marker[4:8] != b"OKOK":
        return Stage.IRET
    return stage


@dataclass(frozen=True, slots=True)
class KvmVerdict:
    """Whether a BIOS guest runs under KVM on a host, and why not."""

    usable: bool
    detail: str
    seconds: float = 0.0
    """How long the probe guest ran (0 when none was started)."""


def probe_domain_xml(*, disk_path: str, cpu: ET.Element | None, domain_type: str = "kvm") -> str:
    """A transient ``kvm`` domain booting the probe disk under SeaBIOS on q35, like a
    proxy's BIOS VM (same machine, disk bus and CPU element) but with no NIC, no console
    and nothing it could write to: the disk is read-only. ``domain_type`` ``qemu`` (TCG)
    is for tests: the same guest must reach long mode there."""
    domain = ET.Element("domain", {"type": domain_type})
    ET.SubElement(domain, "name").text = PROBE_DOMAIN
    metadata = ET.SubElement(domain, "metadata")
    ET.SubElement(metadata, f"{{{PROBE_NAMESPACE}}}probe").text = "kvm"
    ET.SubElement(domain, "memory", {"unit": "MiB"}).text = str(MEMORY_MIB)
    ET.SubElement(domain, "vcpu").text = "1"
    os_element = ET.SubElement(domain, "os")
    ET.SubElement(os_element, "type", {"arch": "x86_64", "machine": "q35"}).text = "hvm"
    ET.SubElement(os_element, "boot", {"dev": "hd"})
    features = ET.SubElement(domain, "features")
    ET.SubElement(features, "acpi")
    ET.SubElement(features, "apic")
    if cpu is not None:
        domain.append(cpu)
    for event in ("on_poweroff", "on_reboot", "on_crash"):
        ET.SubElement(domain, event).text = "destroy"
    devices = ET.SubElement(domain, "devices")
    disk = ET.SubElement(devices, "disk", {"type": "file", "device": "disk"})
    ET.SubElement(disk, "driver", {"name": "qemu", "type": "raw"})
    ET.SubElement(disk, "source", {"file": disk_path})
    ET.SubElement(disk, "target", {"dev": "vda", "bus": "virtio"})
    ET.SubElement(disk, "readonly")
    ET.SubElement(devices, "memballoon", {"model": "none"})
    ET.indent(domain)
    return ET.tostring(domain, encoding="unicode")


def is_probe_xml(xml: str) -> bool:
    """Whether a domain's XML is a probe's: its metadata element, read by local name
    (libvirt 11 drops the namespace declaration of metadata it returns)."""
    root = ET.fromstring(xml)
    return any(
        element.tag.rpartition("}")[2] == "probe" and (element.text or "").strip() == "kvm"
        for element in root.iterfind("metadata/*")
    )
