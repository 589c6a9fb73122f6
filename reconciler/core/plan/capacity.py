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
  overlays only grow as the guest writes) fits the pool's free space, less
  what the VMs placed earlier in the same plan need.

A host whose capacity was not observed (None) only counts ``maxProxies``.
The reason a VM does not fit names the numbers, e.g. ``kvm01: 0.3 GiB free in
pool default, needs 10.0 GiB``.
"""

from __future__ import annotations

from collections import Counter

from reconciler.model.fleet import Host, MachineType, Overcommit
from reconciler.model.inventory import Capacity, DomainState, Inventory

GIB = 2**30


class Room:
    """What each host has left while one plan places its new VMs."""

    def __init__(self, inventory: Inventory, overcommit: Overcommit) -> None:
        self.overcommit = overcommit
        self.capacity: dict[str, Capacity] = {}
        self.vcpus: Counter[str] = Counter()
        self.memory: Counter[str] = Counter()
        self.running: Counter[str] = Counter()  # VMs running or placed by this plan
        self.disk: Counter[str] = Counter()  # bytes promised to VMs placed by this plan
        for host in inventory.hosts:
            if not host.reachable or host.capacity is None:
                continue
            self.capacity[host.name] = host.capacity
            for domain in host.domains:
                if domain.state is DomainState.RUNNING:
                    self.vcpus[host.name] += domain.vcpus or 0
                    self.memory[host.name] += domain.memory_mib or 0
                    self.running[host.name] += 1

    def shortfall(self, host: Host, machine: MachineType) -> str:
        """Why ``machine`` does not fit ``host`` (with the numbers); "" when it fits."""
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
        needs = machine.disk_gib * GIB / self.overcommit.disk
        if needs > free_disk:
            return (
                f"{host.name}: {max(0, free_disk) / GIB:.1f} GiB free in pool {host.pool}, "
                f"needs {needs / GIB:.1f} GiB"
            )
        return ""

    def pool_free(self, host: str) -> int | None:
        """Bytes free in ``host``'s pool as observed (None: not observed)."""
        have = self.capacity.get(host)
        return have.pool_available_bytes if have is not None else None

    def take(self, host: str, machine: MachineType) -> None:
        """Count ``machine`` as placed on ``host`` by this plan."""
        self.vcpus[host] += machine.vcpus
        self.memory[host] += machine.memory_mib
        self.running[host] += 1
        self.disk[host] += int(machine.disk_gib * GIB / self.overcommit.disk)
