"""What the hosts run, as observed: the planner's other input.

Beside the hosts it carries the size of each base image a plan may have to
upload (``BaseSize``): the management box learns it from its image cache or
the image's source, so that placement can count a base a host does not have.

The JSON form (``proxyfleet inventory --json`` and ``plan --inventory FILE``)
is produced and parsed by ``reconciler.core.load.inventory``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DomainState(StrEnum):
    RUNNING = "running"
    SHUTOFF = "shutoff"
    PAUSED = "paused"
    CRASHED = "crashed"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Owner:
    """The proxyfleet ``<metadata>`` element of a domain.

    ``fleet``, ``proxy`` and ``digest`` decide ownership and drift; ``protect``
    guards a VM whose manifest is gone; the rest is provenance recorded at
    creation (empty when unknown).
    """

    fleet: str
    proxy: str
    digest: str
    image_key: str = ""
    image_sha256: str = ""
    revision: str = ""
    created: str = ""
    protect: bool = False
    """``lifecycle.protect`` as it was when the VM was created: the only way a
    plan can still honour it once the manifest is gone."""
    image_base: str = ""
    """The base volume the VM's overlay was created on. Empty for a VM created
    before bases were named by content: its base is ``base-<image_key>.<format>``."""


@dataclass(frozen=True, slots=True)
class Domain:
    """A libvirt domain. ``owner`` is None for a domain without our metadata.

    ``reason`` is libvirt's reason for the state where it tells a failure
    (``crashed``, ``failed``, ``panicked``), else "". ``vcpus`` and
    ``memory_mib`` are what the running domain has now (None when not read):
    a VM edited by hand (``virsh setvcpus``, ``setmem``) differs from its
    machine type.
    """

    name: str
    state: DomainState
    owner: Owner | None = None
    reason: str = ""
    vcpus: int | None = None
    memory_mib: int | None = None

    @property
    def failed(self) -> bool:
        """Down through a failure (crashed, killed, panicked), not shut down by someone."""
        return self.state is DomainState.CRASHED or (
            self.state is DomainState.SHUTOFF and self.reason in FAILURE_REASONS
        )


FAILURE_REASONS = frozenset({"crashed", "failed", "panicked"})


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a host has, as observed: the planner places new VMs only where they fit."""

    cpus: int
    memory_mib: int
    pool_capacity_bytes: int
    pool_available_bytes: int


@dataclass(frozen=True, slots=True)
class HostInventory:
    """One host as observed. An unreachable host has no domains and an ``error``.

    ``volumes`` names every volume in the host's storage pool (empty when the
    pool could not be listed): the planner finds the leftovers of interrupted
    creates among them.
    """

    name: str
    reachable: bool
    domains: tuple[Domain, ...] = ()
    error: str | None = None
    volumes: tuple[str, ...] = ()
    capacity: Capacity | None = None
    """None when not read (an old inventory file, a fake): placement then counts only
    maxProxies."""


@dataclass(frozen=True, slots=True)
class BaseSize:
    """Bytes a base volume takes once uploaded: the size of its image file."""

    volume: str
    """The base volume's name (``base_volume_name``), as it lands in a host's pool."""
    size_bytes: int


@dataclass(frozen=True, slots=True)
class Inventory:
    hosts: tuple[HostInventory, ...] = ()
    base_sizes: tuple[BaseSize, ...] = ()
    """The known sizes of the bases a plan may upload; a base not listed has a size not
    known yet (the image is neither cached nor told by its source)."""

    def host(self, name: str) -> HostInventory | None:
        return next((h for h in self.hosts if h.name == name), None)

    def base_size(self, volume: str) -> int | None:
        """Bytes of base ``volume`` once uploaded; None when not known."""
        return next((b.size_bytes for b in self.base_sizes if b.volume == volume), None)
