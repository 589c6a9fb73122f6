"""What ``proxyfleet hosts check`` asks of a host and what it finds: plain values.

The check itself talks to libvirt (reconciler.adapters.hypervisor.hostcheck.check); the
command (reconciler.cli.hosts) builds a ``Need`` from the fleet and prints the
``HostReport``s, and so reads only these values.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CheckItem:
    name: str
    """ssh, libvirt, pool, network, firmware, capacity or kvm."""
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class HostReport:
    host: str
    items: tuple[CheckItem, ...] = ()
    libvirt_version: str = ""
    qemu_version: str = ""
    cpus: int = 0
    memory_mib: int = 0
    free_memory_mib: int = 0
    pool_free_bytes: int = 0
    kvm_usable: bool | None = None
    """What the KVM probe found; None when it did not decide (not run, or the host failed)."""

    @property
    def ok(self) -> bool:
        return all(item.ok for item in self.items)


@dataclass(frozen=True, slots=True)
class BaseNeed:
    """A base image of the fleet, uploaded into a pool that does not hold it yet."""

    key: str
    volume: str
    """The base volume's name in the pool (``base_volume_name``)."""
    size_bytes: int | None
    """Bytes it takes once uploaded; None when not known yet (not cached, source silent)."""


@dataclass(frozen=True, slots=True)
class Need:
    """Room a host needs: the fleet's base images it lacks, plus one VM of the fleet's
    largest machine type."""

    disk_bytes: int = 0
    memory_mib: int = 0
    what: str = ""
    """Which machine type, for the message (``large: 4 vCPUs, 8 GiB, 40 GiB disk``)."""
    images: tuple[BaseNeed, ...] = ()
    """The fleet's images; those whose verified base (base and marker) the pool lacks count."""
