"""Everything a host needs to create one proxy VM, resolved and frozen.

The engine builds a VmSpec from the repo and a plan action; the host adapter
turns it into volumes, a seed ISO and a domain. Cloud-init content rides in
``cloud_init``, whose repr is redacted.
"""

from __future__ import annotations

from dataclasses import dataclass

from reconciler.model.fleet import CloudInit, FixedAddress, Host, Image, MachineType, guest_mac
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
    network: FixedAddress | None = None
    """A fixed address: the NIC gets ``mac`` and the seed a network-config for it."""

    @property
    def mac(self) -> str | None:
        """The NIC's MAC for a fixed-address proxy (stable across replaces); None: libvirt's."""
        return guest_mac(self.owner.fleet, self.proxy) if self.network is not None else None

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


BASE_PREFIX = "base-"
MARKER_SUFFIX = ".sha256"
SHA_PREFIX = 12
"""Hex digits of the sha256 in a content-named base: 48 bits, so two contents of one key
never meet by chance, short enough for ``virsh vol-list``."""
BASE_FORMATS = ("qcow2", "raw")


def base_volume_name(image: Image) -> str:
    """The base volume ``image``'s overlays back onto, in the host's pool (DESIGN.md).

    Named by content: ``base-<key>-<first 12 hex of sha256>.<format>``, so a new
    sha256 (or url with its sha256) for a key is a new base, uploaded beside the
    old one, which stays as long as an overlay uses it. An image without a
    pinned sha256 has no content to be named by before it is downloaded: its
    base keeps the key alone, ``base-<key>.<format>`` (the layout before content
    names), and a changed download is uploaded over it only while no overlay
    uses it.
    """
    if image.sha256:
        prefix = image.sha256.strip().lower()[:SHA_PREFIX]
        return f"{BASE_PREFIX}{image.key}-{prefix}.{image.format.value}"
    return f"{BASE_PREFIX}{image.key}.{image.format.value}"


def legacy_base_names(key: str) -> tuple[str, str]:
    """``base-<key>.qcow2`` and ``base-<key>.raw``: a base named by key alone (the layout
    before content names, and the name of an image without a pinned sha256)."""
    return (f"{BASE_PREFIX}{key}.qcow2", f"{BASE_PREFIX}{key}.raw")


def base_marker_name(base: str) -> str:
    """The marker volume beside base volume ``base``: its verified checksum, written last."""
    return f"{base}{MARKER_SUFFIX}"


def is_base_volume(name: str) -> bool:
    """True for a name shaped as a base volume (``base-*.qcow2`` or ``base-*.raw``)."""
    return name.startswith(BASE_PREFIX) and name.rpartition(".")[2] in BASE_FORMATS
