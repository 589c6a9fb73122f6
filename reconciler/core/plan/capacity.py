"""Room on a host: does a new VM's machine type fit its CPUs, memory and pool?

Pure, fed from the inventory: each host's CPUs, memory and pool space as
observed (``Capacity``), and what its running domains (owned and foreign)
already use. A new VM fits a host when

- the vCPUs of the running domains plus its own stay within the host's CPUs
  times ``policy.overcommit.cpu`` (default 4.0);
- their memory plus its own stays within the host's memory times
  ``policy.overcommit.memory`` (default 1.0); on a ``domainType: qemu`` host
  every VM, running or new, also counts the host's ``tcgCacheMiB`` (QEMU's
  TCG translation cache, allocated per VM beside its memory);
- its disk divided by ``policy.overcommit.disk`` (default 1.0; thin qcow2
  overlays only grow as the guest writes), plus its base image when the host
  does not have it yet, fits the pool's free space, less what the VMs placed
  earlier in the same plan need.

A base counts at its full size (the inventory's ``base_sizes``: an upload is
not thin) once per host and plan: not at all where the pool already holds it,
verified (the base and its marker), and only for the first of several new VMs
on it. A base whose size is not known yet (the image is neither cached on the
management box nor sized by its source) cannot be counted: the host is judged
on the disk alone and the reason says so (``base_note``); the upload then
fails at once on a full pool, with its numbers, and the next run knows the
size from the cache.

A host whose capacity was not observed (None) only counts ``maxProxies``.
The reason a VM does not fit names the numbers, e.g. ``kvm01: 0.3 GiB free in
pool default, needs 10.3 GiB (10.0 GiB disk + 0.3 GiB base image debian, not
on the host yet)``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from reconciler.core.naming import resolve_image
from reconciler.model.fleet import Host, Image, MachineType, Overcommit, Repo
from reconciler.model.inventory import Capacity, DomainState, Inventory
from reconciler.model.vm import base_marker_name, base_volume_name

GIB = 2**30


def unsized_bases(repo: Repo, inventory: Inventory) -> tuple[Image, ...]:
    """The images whose size a plan over ``inventory`` may need: those the proxies use whose
    verified base is missing on a reachable host that reports its capacity and is not
    sized in the inventory yet. Once every host holds its bases, none (no lookup at all)."""
    counted = [h for h in inventory.hosts if h.reachable and h.capacity is not None]
    found: dict[str, Image] = {}
    for proxy in repo.proxies:
        image = resolve_image(repo.fleet, proxy.placement.image)
        if image is None:
            continue
        base = base_volume_name(image)
        if base in found or inventory.base_size(base) is not None:
            continue
        if any(not _verified(base, h.volumes) for h in counted):
            found[base] = image
    return tuple(found[b] for b in sorted(found))


def _verified(base: str, volumes: Collection[str]) -> bool:
    """The pool holds ``base`` and its marker: a complete, verified upload."""
    return base in volumes and base_marker_name(base) in volumes


class Room:
    """What each host has left while one plan places its new VMs."""

    def __init__(self, inventory: Inventory, overcommit: Overcommit) -> None:
        self.overcommit = overcommit
        self.capacity: dict[str, Capacity] = {}
        self.vcpus: Counter[str] = Counter()
        self.memory: Counter[str] = Counter()
        self.running: Counter[str] = Counter()  # VMs running or placed by this plan
        self.disk: Counter[str] = Counter()  # bytes promised to VMs placed by this plan
        self.bases: dict[str, set[str]] = {}  # host -> bases it holds or this plan uploads
        self.sizes = {b.volume: b.size_bytes for b in inventory.base_sizes}
        for host in inventory.hosts:
            if not host.reachable or host.capacity is None:
                continue
            self.capacity[host.name] = host.capacity
            volumes = set(host.volumes)
            self.bases[host.name] = {v for v in volumes if _verified(v, volumes)}
            for domain in host.domains:
                if domain.state is DomainState.RUNNING:
                    self.vcpus[host.name] += domain.vcpus or 0
                    self.memory[host.name] += domain.memory_mib or 0
                    self.running[host.name] += 1

    def _missing_base(self, host: str, image: Image) -> str | None:
        """The base ``image`` needs on ``host`` when the host lacks it; None when it has it
        (or this plan already uploads it there)."""
        base = base_volume_name(image)
        return None if base in self.bases.get(host, set()) else base

    def _base_bytes(self, host: str, image: Image) -> int:
        """Bytes the base of ``image`` adds on ``host``: 0 when there or not known."""
        base = self._missing_base(host, image)
        return 0 if base is None else self.sizes.get(base, 0)

    def base_note(self, host: str, image: Image) -> str:
        """What placement could not count on ``host``: "" unless the host lacks the base
        of ``image`` and its size is not known yet."""
        base = self._missing_base(host, image)
        if host not in self.capacity or base is None or base in self.sizes:
            return ""
        return (
            f"base image {image.key} is not on {host} yet and its size is not known yet "
            "(not cached on this box): only the disk was counted"
        )

    def shortfall(self, host: Host, machine: MachineType, image: Image) -> str:
        """Why ``machine`` on ``image`` does not fit ``host`` (with the numbers); "" when
        it fits."""
        have = self.capacity.get(host.name)
        if have is None:
            return ""
        cpus = have.cpus * self.overcommit.cpu
        if self.vcpus[host.name] + machine.vcpus > cpus:
            return (
                f"{host.name}: {self.vcpus[host.name]} of {cpus:g} vCPUs taken "
                f"({have.cpus} CPUs x overcommit {self.overcommit.cpu:g}), "
                f"needs {machine.vcpus}"
            )
        memory = have.memory_mib * self.overcommit.memory
        used = self.memory[host.name] + self.running[host.name] * (host.tcg_cache or 0)
        if used + host.vm_memory_mib(machine.memory_mib) > memory:
            free = max(0.0, memory - used) / 1024
            needs = host.vm_memory_mib(machine.memory_mib) / 1024
            tcg = f", {host.tcg_cache} MiB of it TCG cache" if host.tcg_cache else ""
            return (
                f"{host.name}: {free:.1f} GiB of memory free "
                f"(overcommit {self.overcommit.memory:g}), needs {needs:.1f} GiB{tcg}"
            )
        free_disk = have.pool_available_bytes - self.disk[host.name]
        disk = machine.disk_gib * GIB / self.overcommit.disk
        base = self._base_bytes(host.name, image)
        if disk + base > free_disk:
            return (
                f"{host.name}: {max(0, free_disk) / GIB:.1f} GiB free in pool {host.pool}, "
                f"needs {(disk + base) / GIB:.1f} GiB{self._parts(host.name, image, disk)}"
            )
        return ""

    def _parts(self, host: str, image: Image, disk: float) -> str:
        """How the disk need splits when the host lacks the base (else "")."""
        base = self._missing_base(host, image)
        if base is None:
            return ""
        size = self.sizes.get(base)
        if size is None:
            return (
                f" for the disk, plus base image {image.key} (not on the host yet; "
                "its size is not known yet)"
            )
        return (
            f" ({disk / GIB:.1f} GiB disk + {size / GIB:.1f} GiB base image {image.key}, "
            "not on the host yet)"
        )

    def pool_free(self, host: str) -> int | None:
        """Bytes free in ``host``'s pool as observed (None: not observed)."""
        have = self.capacity.get(host)
        return have.pool_available_bytes if have is not None else None

    def take(self, host: str, machine: MachineType, image: Image) -> None:
        """Count ``machine`` on ``image`` as placed on ``host`` by this plan (its base once)."""
        self.vcpus[host] += machine.vcpus
        self.memory[host] += machine.memory_mib
        self.running[host] += 1
        self.disk[host] += int(machine.disk_gib * GIB / self.overcommit.disk)
        self.disk[host] += self._base_bytes(host, image)
        if host in self.bases:
            self.bases[host].add(base_volume_name(image))
