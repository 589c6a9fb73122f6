"""Fencing: no mutating host call without the fleet lock.

``FencedHost`` wraps a Hypervisor and asks ``held()`` (the lock's cached
lease state, no I/O) right before every mutating call; when the lock is no
longer ours it raises FencedError (a PermanentError) instead of calling the
host, so the executor records the action as failed and goes on refusing the
rest of the plan. Reads (observe, addresses) pass through: a standby may
look, only the leader acts.

A call already in flight when the lease runs out is not recalled: libvirt has
no way to. The lease's margin (adapters.coordination.toozlock) makes the lock count as
lost well before anyone else can take it, and every action is idempotent or
cleaned up by the next leader's plan (leftover volumes of a create).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from reconciler.adapters.hypervisor.host import Hypervisor
from reconciler.engine.pool import HostFactory
from reconciler.errors import FencedError
from reconciler.model import Host, HostInventory, Image, Owner
from reconciler.model.vm import VmSpec

Held = Callable[[], bool]
"""True while this process holds the fleet's lock (``FleetLock.held``)."""


class FencedHost:
    """A Hypervisor whose mutating calls need ``held()``; the rest pass through."""

    def __init__(self, inner: Hypervisor, held: Held) -> None:
        self._inner = inner
        self._held = held

    @property
    def name(self) -> str:
        return self._inner.name

    def _fence(self, rpc: str) -> None:
        if not self._held():
            raise FencedError(
                "this process no longer holds the fleet lock; not acting",
                host=self.name,
                rpc=rpc,
            )

    def observe(self) -> HostInventory:
        return self._inner.observe()

    def ensure_image(self, image: Image, local_file: Path) -> None:
        self._fence("ensure_image")
        self._inner.ensure_image(image, local_file)

    def create(self, spec: VmSpec) -> None:
        self._fence("create")
        self._inner.create(spec)

    def start(self, domain: str) -> None:
        self._fence("start")
        self._inner.start(domain)

    def set_owner(self, domain: str, owner: Owner) -> None:
        self._fence("set_owner")
        self._inner.set_owner(domain, owner)

    def delete(self, domain: str) -> None:
        self._fence("delete")
        self._inner.delete(domain)

    def remove_volumes(self, domain: str, volumes: tuple[str, ...]) -> tuple[str, ...]:
        self._fence("remove_volumes")
        return self._inner.remove_volumes(domain, volumes)

    def remove_unused_base(self, base: str) -> tuple[str, ...]:
        self._fence("remove_unused_base")
        return self._inner.remove_unused_base(base)

    def addresses(self, domain: str) -> tuple[str, ...]:
        return self._inner.addresses(domain)

    def close(self) -> None:
        self._inner.close()


def fenced(factory: HostFactory, held: Held) -> HostFactory:
    """``factory`` whose hosts are FencedHosts asking ``held``."""

    def make(host: Host) -> Hypervisor:
        return FencedHost(factory(host), held)

    return make
