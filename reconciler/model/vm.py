"""Everything a host needs to create one proxy VM, resolved and frozen.

The engine builds a VmSpec from the repo and a plan action; the host adapter
turns it into volumes, a seed ISO and a domain. Cloud-init content rides in
``cloud_init``, whose repr is redacted.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.model.fleet import CloudInit, Host, Image, MachineType
from reconciler.model.inventory import Owner


@dataclass(frozen=True, slots=True)
class VmSpec:
    domain: str
    proxy: str
    host: Host
    image: Image
    machine_type: MachineType
    cloud_init: CloudInit
    install_guest_agent: bool
    owner: Owner

    @property
    def overlay_name(self) -> str:
        return vm_volumes(self.domain)[0]

    @property
    def seed_name(self) -> str:
        return vm_volumes(self.domain)[1]

    @property
    def base_name(self) -> str:
        return base_volume_name(self.image)


OVERLAY_SUFFIX = ".qcow2"
SEED_SUFFIX = "-seed.iso"


def vm_volumes(domain: str) -> tuple[str, str]:
    """The overlay and the seed volume of ``domain``."""
    return (f"{domain}{OVERLAY_SUFFIX}", f"{domain}{SEED_SUFFIX}")


def base_volume_name(image: Image) -> str:
    """``base-<key>.<format>`` in the host's pool (DESIGN.md)."""
    return f"base-{image.key}.{image.format.value}"
