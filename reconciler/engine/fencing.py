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

A lock given up on purpose (the fleet was assigned to another daemon) needs no
margin: ``Fence.close`` shuts the fence and waits for the calls already past it
to return, and only then is the lock released, so the next owner never acts
while this one still has a call in flight.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from reconciler.engine.pool import HostFactory
from reconciler.errors import FencedError
from reconciler.model import Host, HostInventory, Image, Owner
from reconciler.model.vm import VmSpec
from reconciler.ports.hypervisor import Hypervisor

Held = Callable[[], bool]
"""True while this process holds the fleet's lock (``FleetLock.held``)."""


class Fence:
    """``held`` plus a count of the mutating calls past the fence right now.

    ``passing`` is the gate of one call; ``close`` shuts the gate (whatever ``held``
    says) and waits for the calls in flight, ``open`` lets ``held`` decide again.
    """

    def __init__(self, held: Held) -> None:
        self._held = held
        self._cond = threading.Condition()
        self._in_flight = 0
        self._closed = False

    def held(self) -> bool:
        return not self._closed and self._held()

    @property
    def closed(self) -> bool:
        """True from ``close`` to ``open``: a hand-over is under way or done."""
        return self._closed

    @contextlib.contextmanager
    def passing(self, host: str, rpc: str) -> Iterator[None]:
        with self._cond:
            if not self.held():
                raise FencedError(
                    "this process no longer holds the fleet lock; not acting", host=host, rpc=rpc
                )
            self._in_flight += 1
        try:
            yield
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()

    def close(self, timeout: float) -> bool:
        """Shut the gate; True once no call is in flight, False when ``timeout`` s ran out."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._closed = True
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def open(self) -> None:
        with self._cond:
            self._closed = False


class FencedHost:
    """A Hypervisor whose mutating calls need the fence open; the rest pass through."""

    def __init__(self, inner: Hypervisor, fence: Fence | Held) -> None:
        self._inner = inner
        self._fence_of = fence if isinstance(fence, Fence) else Fence(fence)

    @property
    def name(self) -> str:
        return self._inner.name

    def _fence(self, rpc: str) -> contextlib.AbstractContextManager[None]:
        return self._fence_of.passing(self.name, rpc)

    def dial_ahead(self) -> None:
        self._inner.dial_ahead()

    def observe(self) -> HostInventory:
        return self._inner.observe()

    def ensure_image(self, image: Image, local_file: Path) -> None:
        with self._fence("ensure_image"):
            self._inner.ensure_image(image, local_file)

    def create(self, spec: VmSpec) -> None:
        with self._fence("create"):
            self._inner.create(spec)

    def start(self, domain: str) -> None:
        with self._fence("start"):
            self._inner.start(domain)

    def set_owner(self, domain: str, owner: Owner) -> None:
        with self._fence("set_owner"):
            self._inner.set_owner(domain, owner)

    def delete(self, domain: str) -> None:
        with self._fence("delete"):
            self._inner.delete(domain)

    def remove_volumes(self, domain: str, volumes: tuple[str, ...]) -> tuple[str, ...]:
        with self._fence("remove_volumes"):
            return self._inner.remove_volumes(domain, volumes)

    def remove_unused_base(self, base: str) -> tuple[str, ...]:
        with self._fence("remove_unused_base"):
            return self._inner.remove_unused_base(base)

    def addresses(self, domain: str) -> tuple[str, ...]:
        return self._inner.addresses(domain)

    def close(self) -> None:
        self._inner.close()


def fenced(factory: HostFactory, fence: Fence | Held) -> HostFactory:
    """``factory`` whose hosts are FencedHosts behind ``fence`` (or a plain ``held``)."""

    def make(host: Host) -> Hypervisor:
        return FencedHost(factory(host), fence)

    return make
