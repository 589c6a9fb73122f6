"""Domain and volume XML for one proxy VM, built with ElementTree.

Rules the seed learned on real hosts and that hold here by construction:

- Disks are ``type="file"`` with ``<source file=...>`` host paths (the caller
  resolves them with ``virStorageVolGetPath``). ``type="volume"`` gives
  virt-aa-helper pool and volume names instead of paths, so AppArmor-confined
  QEMU cannot open the overlay or its backing file ("Permission denied").
- UEFI is ``<os firmware="efi">`` with secure boot off: libvirt picks the OVMF
  binary and owns the NVRAM file, which undefine-with-NVRAM removes. Debian 13
  images hang in GRUB under SeaBIOS with a serial console and no video device.
- ``cpu_mode: none`` writes no ``<cpu>`` at all: host-model CPUs died on
  "failed to set MSR 0x10a" on the lab's nested KVM.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

from reconciler.core.render.metadata import owner_element
from reconciler.errors import PermanentError
from reconciler.model.fleet import Firmware, Host
from reconciler.model.vm import VmSpec

GUEST_AGENT_CHANNEL = "org.qemu.guest_agent.0"
_CPU_MODES = ("host-model", "host-passthrough")


def domain_xml(spec: VmSpec, *, disk_path: str, seed_path: str) -> str:
    """The full ``<domain>`` for ``virDomainDefineXML``."""
    domain = ET.Element("domain", {"type": spec.host.domain_type.value})
    ET.SubElement(domain, "name").text = spec.domain
    metadata = ET.SubElement(domain, "metadata")
    metadata.append(owner_element(spec.owner))
    memory = str(spec.machine_type.memory_mib)
    ET.SubElement(domain, "memory", {"unit": "MiB"}).text = memory
    ET.SubElement(domain, "currentMemory", {"unit": "MiB"}).text = memory
    ET.SubElement(domain, "vcpu", {"placement": "static"}).text = str(spec.machine_type.vcpus)
    domain.append(_os(spec.image.firmware))
    features = ET.SubElement(domain, "features")
    ET.SubElement(features, "acpi")
    ET.SubElement(features, "apic")
    if spec.host.tcg_cache is not None:
        tcg = ET.SubElement(features, "tcg")
        ET.SubElement(tcg, "tb-cache", {"unit": "MiB"}).text = str(spec.host.tcg_cache)
    cpu = cpu_element(spec.host.cpu_mode)
    if cpu is not None:
        domain.append(cpu)
    ET.SubElement(domain, "clock", {"offset": "utc"})
    ET.SubElement(domain, "on_poweroff").text = "destroy"
    ET.SubElement(domain, "on_reboot").text = "restart"
    ET.SubElement(domain, "on_crash").text = "destroy"
    domain.append(_devices(spec.host, disk_path=disk_path, seed_path=seed_path, mac=spec.mac))
    ET.indent(domain)
    return ET.tostring(domain, encoding="unicode")


def overlay_volume_xml(name: str, *, capacity_gib: int, base_path: str, base_format: str) -> str:
    """A qcow2 volume backed by the base image at ``base_path`` (a host path)."""
    volume = ET.Element("volume", {"type": "file"})
    ET.SubElement(volume, "name").text = name
    ET.SubElement(volume, "capacity", {"unit": "GiB"}).text = str(capacity_gib)
    target = ET.SubElement(volume, "target")
    ET.SubElement(target, "format", {"type": "qcow2"})
    backing = ET.SubElement(volume, "backingStore")
    ET.SubElement(backing, "path").text = base_path
    ET.SubElement(backing, "format", {"type": base_format})
    ET.indent(volume)
    return ET.tostring(volume, encoding="unicode")


def plain_volume_xml(name: str, *, capacity_bytes: int, fmt: str) -> str:
    """A volume without backing store: a raw/qcow2 base, the seed ISO, a marker.

    Allocation 0 keeps the pool from writing zeros before the upload fills it.
    """
    volume = ET.Element("volume", {"type": "file"})
    ET.SubElement(volume, "name").text = name
    ET.SubElement(volume, "capacity", {"unit": "bytes"}).text = str(capacity_bytes)
    ET.SubElement(volume, "allocation", {"unit": "bytes"}).text = "0"
    target = ET.SubElement(volume, "target")
    ET.SubElement(target, "format", {"type": fmt})
    ET.indent(volume)
    return ET.tostring(volume, encoding="unicode")


def _os(firmware: Firmware) -> ET.Element:
    os_element = ET.Element("os")
    if firmware is Firmware.UEFI:
        os_element.set("firmware", "efi")
    ET.SubElement(os_element, "type", {"arch": "x86_64", "machine": "q35"}).text = "hvm"
    if firmware is Firmware.UEFI:
        # Secure boot off through the autoselection filter (libvirt >= 7.2).
        # No <loader secure="no"/>: the schema allows it, but libvirt 9.0
        # refuses it next to firmware="efi" ("loader attribute 'secure' cannot
        # be specified when firmware autoselection is enabled"); only 9.2+
        # reads loader attributes as filters.
        wanted = ET.SubElement(os_element, "firmware")
        ET.SubElement(wanted, "feature", {"enabled": "no", "name": "enrolled-keys"})
        ET.SubElement(wanted, "feature", {"enabled": "no", "name": "secure-boot"})
    ET.SubElement(os_element, "boot", {"dev": "hd"})
    return os_element


def cpu_element(mode: str) -> ET.Element | None:
    """The ``<cpu>`` a host's ``cpuMode`` asks for; None for ``none``."""
    if mode == "none":
        return None
    if mode in _CPU_MODES:
        return ET.Element("cpu", {"mode": mode})
    cpu = ET.Element("cpu", {"mode": "custom", "match": "exact"})
    ET.SubElement(cpu, "model").text = mode
    return cpu


def _devices(host: Host, *, disk_path: str, seed_path: str, mac: str | None) -> ET.Element:
    devices = ET.Element("devices")

    disk = ET.SubElement(devices, "disk", {"type": "file", "device": "disk"})
    ET.SubElement(disk, "driver", {"name": "qemu", "type": "qcow2", "discard": "unmap"})
    ET.SubElement(disk, "source", {"file": disk_path})
    ET.SubElement(disk, "target", {"dev": "vda", "bus": "virtio"})

    seed = ET.SubElement(devices, "disk", {"type": "file", "device": "cdrom"})
    ET.SubElement(seed, "driver", {"name": "qemu", "type": "raw"})
    ET.SubElement(seed, "source", {"file": seed_path})
    ET.SubElement(seed, "target", {"dev": "sda", "bus": "sata"})
    ET.SubElement(seed, "readonly")

    devices.append(_interface(host, mac=mac))

    serial = ET.SubElement(devices, "serial", {"type": "pty"})
    ET.SubElement(serial, "target", {"port": "0"})
    console = ET.SubElement(devices, "console", {"type": "pty"})
    ET.SubElement(console, "target", {"type": "serial", "port": "0"})

    channel = ET.SubElement(devices, "channel", {"type": "unix"})
    ET.SubElement(channel, "target", {"type": "virtio", "name": GUEST_AGENT_CHANNEL})

    ET.SubElement(devices, "memballoon", {"model": "virtio"})
    rng = ET.SubElement(devices, "rng", {"model": "virtio"})
    ET.SubElement(rng, "backend", {"model": "random"}).text = "/dev/urandom"
    return devices


def _interface(host: Host, *, mac: str | None) -> ET.Element:
    """The NIC on the host's network; ``mac`` (a fixed-address proxy's) pinned, else
    libvirt picks one."""
    kind = host.network.kind
    if kind not in ("bridge", "network"):
        raise PermanentError(
            f"network kind {kind!r} is neither 'bridge' nor 'network'", host=host.name
        )
    interface = ET.Element("interface", {"type": kind})
    if mac is not None:
        ET.SubElement(interface, "mac", {"address": mac})
    ET.SubElement(interface, "source", {kind: host.network.name})
    ET.SubElement(interface, "model", {"type": "virtio"})
    return interface
