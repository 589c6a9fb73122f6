"""The hypervisor seam: what the engine needs from one libvirt host.

Real: ``LibvirtHost`` (reconciler.adapters.hypervisor.libvirthost), over SSH.
Fake: ``FakeHypervisor`` (reconciler.adapters.hypervisor.fakehost), in memory, for unit
tests of the engine and nothing else. Contract: tests/integration/test_host_contract.py
(a real libvirtd).

Every method raises only ``reconciler.errors.HostError`` subclasses, already
classified: TransientError (retry), PermanentError (report), NotFoundError.
Costs are noted per method: "RPCs" counts libvirt calls over the SSH link.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from reconciler.model import HostInventory, Image, Owner
from reconciler.model.vm import VmSpec


class Hypervisor(Protocol):
    @property
    def name(self) -> str:
        """The host's name from fleet.yaml."""
        ...

    def dial_ahead(self) -> None:
        """Start connecting without waiting for it, so that the handshake runs while the
        caller does something else; the next call waits for it. Never raises (the call
        that needs the connection says what failed); nothing where connecting is instant
        or already done."""
        ...

    def observe(self) -> HostInventory:
        """Every domain on the host with its state and owner (None if foreign), and the
        names of the volumes in the host's pool (listed first).

        Also the host's capacity (CPUs, memory, the pool's size and free space) and,
        per domain, its state reason and, when running, its vCPUs and memory.
        Cost: 3 RPCs for the pool, 1 for the node, 1 bulk stats RPC + 1 metadata read
        per domain (the daemon's: per domain changed since its last read). Raises TransientError
        when the host cannot be read; callers mark it unreachable.
        """
        ...

    def ensure_image(self, image: Image, local_file: Path) -> None:
        """Make the base named by ``image``'s content (``base_volume_name``) and its marker
        exist in the pool.

        Uploads ``local_file`` (already sha256-verified) unless the marker says
        the same checksum is there. Other bases of the same key are left alone.
        Raises PermanentError only when a base without a pinned sha256 must
        change but overlays still use it. Cost: a few RPCs, plus the upload.
        """
        ...

    def create(self, spec: VmSpec) -> None:
        """Overlay, seed ISO (always rebuilt), define and start. Idempotent."""
        ...

    def start(self, domain: str) -> None:
        """Start a shut-off domain, a crashed one (destroyed first), or resume a paused one.
        Cost: 2 RPCs (lookup, state) + the start, destroy or resume."""
        ...

    def set_owner(self, domain: str, owner: Owner) -> None:
        """Rewrite the ownership element of one of this fleet's domains (e.g. a changed protect).

        Written to the persistent definition and, while the domain runs, to the
        live one too, so that ``observe`` reads it back either way. Refuses
        (PermanentError) a domain whose element is missing or names another
        fleet, proxy or digest: foreign domains are never touched, and a VM's
        identity is never rewritten. Missing domain: NotFoundError.
        Cost: 4 RPCs (lookup, XML, active?, set), 5 when the domain was shut off.
        """
        ...

    def delete(self, domain: str) -> None:
        """Destroy, undefine (with NVRAM), remove overlay and seed. Gone already: no error."""
        ...

    def remove_volumes(self, domain: str, volumes: tuple[str, ...]) -> tuple[str, ...]:
        """Delete ``volumes`` (``domain``'s overlay and/or seed) of a domain that does not exist.

        Confirms on the host first that no domain named ``domain`` exists and
        that no domain's disk uses any of the volumes; refuses (PermanentError,
        nothing deleted) otherwise, and for any other volume name. Returns the
        names deleted (a volume already gone is skipped).
        Cost: a few RPCs plus one XML read per domain on the host.
        """
        ...

    def remove_unused_base(self, base: str) -> tuple[str, ...]:
        """Delete base volume ``base`` and its marker (marker first) unless a domain uses it.

        Confirms on the host right before deleting that no domain (owned or
        foreign, running or not) has a disk that names the base, by path or by
        pool and volume, backing chains included, and that no volume of the pool
        backs onto it (an operator's copy). When one does, nothing is
        deleted and the result is empty: the planner only saw names, and a base
        in use is not a failure. Refuses (PermanentError) a name that is not
        shaped as a base volume. Returns the names deleted (gone ones skipped).
        Cost: 1 pool lookup, 3 RPCs per volume, 1 domain listing + 1 XML read per
        domain, 2 RPCs per disk path, 1 refresh + 1 listing + 1 XML read per pool volume.
        """
        ...

    def addresses(self, domain: str) -> tuple[str, ...]:
        """IPv4 addresses: guest agent first, then libvirt's DHCP leases, then ARP."""
        ...

    def close(self) -> None:
        """Drop the SSH connection; the next call dials again."""
        ...
