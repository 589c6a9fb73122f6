"""``FakeHypervisor``: an in-memory Hypervisor for the executor's unit tests (and nothing else).

It keeps the rules of the real adapter (reconciler.adapters.hypervisor.libvirthost), so a
test against the fake means the same thing against a host:

- ``create`` is idempotent (an existing domain is only started) and needs the
  image ensured first, with a matching checksum;
- ``ensure_image`` uploads the base named by content (``base_volume_name``) and
  its marker into the pool's volumes only when the checksum changed, and
  refuses to replace a base that a VM still uses ("base image in use by N
  overlays");
- ``remove_unused_base`` removes a base and its marker unless a domain's disk
  names it (its overlay backs onto it, ``overlays``, or ``uses`` names it): then
  it deletes nothing and says so (no error), as the real adapter does;
- ``delete`` of something already gone succeeds; of a domain without
  proxyfleet metadata it fails permanently;
- ``set_owner`` refuses a domain whose owner is missing or names another
  fleet, proxy or digest, and records a mutation only when the owner changes;
- ``start`` and ``addresses`` of a missing domain raise NotFoundError;
- ``create`` makes the overlay and seed volumes and ``delete`` removes them;
  ``remove_volumes`` refuses names that are not the domain's, a domain that
  exists, and volumes a domain uses (``uses``), as the real adapter does.

Failure injection (reconciler.adapters.hypervisor.fakecalls): ``unreachable = True``
makes every call raise TransientError; ``fail(method, error, times=N, target=...)``
raises ``error`` on the next N matching calls (``times=None``: every one; failures
scripted for one method are taken in the order they were added), where ``error`` is a
HostError the real adapter raises or any other exception standing for an adapter bug;
``on_call`` runs before each call acts (to block or count); ``latency`` seconds make
every mutating call take that long, counted by ``in_flight`` (this host) and the
``gauge`` given to the constructor (shared by several hosts). ``calls`` records every
call, ``mutations`` only those that changed something, so "a second run makes no
mutating call" is ``fake.mutations == []`` after ``fake.forget()``; ``requested()``
lists the calls of mutating methods whether or not they changed anything.

A VM the real adapter creates gets its address when its guest boots; with
``auto_ip=True`` the fake gives each new VM one in 192.0.2.0/24 at once (a guest that
boots instantly), else a test sets ``addresses_of`` when it likes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from reconciler.adapters.hypervisor.fakecalls import ANY, MUTATING, Call, Failures, Gauge
from reconciler.errors import NotFoundError, PermanentError, TransientError
from reconciler.model import Domain, DomainState, HostInventory, Image, Owner
from reconciler.model.inventory import Capacity
from reconciler.model.vm import (
    VmSpec,
    base_marker_name,
    base_volume_name,
    is_base_volume,
    vm_volumes,
)

__all__ = ["ANY", "Call", "FakeHypervisor", "Gauge"]


class FakeHypervisor:
    """One fake host. Thread-safe; the executor may call it from several workers."""

    def __init__(
        self,
        name: str,
        *,
        domains: tuple[Domain, ...] = (),
        auto_ip: bool = False,
        latency: float = 0.0,
        gauge: Gauge | None = None,
    ) -> None:
        self._name = name
        self._lock = threading.Lock()
        self.domains: dict[str, Domain] = {d.name: d for d in domains}
        self.specs: dict[str, VmSpec] = {}
        self.images: dict[str, str] = {}
        """base volume name -> checksum of the verified base on this host."""
        self.overlays: dict[str, str] = {}
        """domain -> base volume name its overlay is backed by."""
        self.addresses_of: dict[str, tuple[str, ...]] = {}
        self.volumes: set[str] = set()
        """Names of the volumes in the pool (bases and their markers once ensured)."""
        self.uses: dict[str, frozenset[str]] = {}
        """domain -> the volumes its disks name."""
        self.calls: list[Call] = []
        self.mutations: list[Call] = []
        self.capacity: Capacity | None = None
        """What ``observe`` reports the host has (None: not read, as an old inventory)."""
        self.unreachable = False
        self.closed = 0
        self.dialled_ahead = 0
        self.on_call: Callable[[Call], None] | None = None
        """Runs (outside the lock) on every call before it acts: for blocking or counting."""
        self.auto_ip = auto_ip
        self.latency = latency
        """Seconds every mutating call takes (slept outside the lock, after ``on_call``)."""
        self.in_flight = Gauge()
        self.gauge = gauge if gauge is not None else Gauge()
        self._failures = Failures()
        self._next_ip = 10

    @property
    def name(self) -> str:
        return self._name

    def fail(
        self, method: str, error: Exception, *, times: int | None = 1, target: str = ANY
    ) -> None:
        """Raise ``error`` on the next ``times`` calls of ``method`` (on ``target``)."""
        with self._lock:
            self._failures.add(method, error, times=times, target=target)

    def requested(self) -> list[Call]:
        """The calls of mutating methods so far, whether or not they changed anything."""
        with self._lock:
            return [c for c in self.calls if c.method in MUTATING]

    def add_domain(
        self, name: str, state: DomainState = DomainState.RUNNING, owner: Owner | None = None
    ) -> None:
        """Put a domain on the host as if someone else had made it (foreign when no owner)."""
        with self._lock:
            self.domains[name] = Domain(name=name, state=state, owner=owner)

    def add_volumes(self, *names: str, used_by: str | None = None) -> None:
        """Put volumes in the pool; ``used_by``: a domain whose disks name them."""
        with self._lock:
            self.volumes.update(names)
            if used_by is not None:
                self.uses[used_by] = self.uses.get(used_by, frozenset()) | set(names)

    def set_state(self, name: str, state: DomainState) -> None:
        with self._lock:
            self.domains[name] = replace(self.domains[name], state=state)

    def forget(self) -> None:
        """Clear the call logs (between two runs of a test)."""
        with self._lock:
            self.calls.clear()
            self.mutations.clear()

    def dial_ahead(self) -> None:
        with self._lock:
            self.dialled_ahead += 1  # connected from the start; counted for the tests

    def observe(self) -> HostInventory:
        self._enter(Call("observe"))
        with self._lock:
            domains = tuple(sorted(self.domains.values(), key=lambda d: d.name))
            volumes = tuple(sorted(self.volumes))
        return HostInventory(
            name=self._name,
            reachable=True,
            domains=domains,
            volumes=volumes,
            capacity=self.capacity,
        )

    def ensure_image(self, image: Image, local_file: Path) -> None:
        call = Call("ensure_image", image.key)
        self._enter(call)
        wanted = image.sha256 or f"file:{local_file}"
        base = base_volume_name(image)
        with self._lock:
            if self.images.get(base) == wanted:
                return
            users = sorted(d for d, used in self.overlays.items() if used == base)
            if base in self.images and users:
                raise PermanentError(
                    f"base image in use by {len(users)} overlays ({', '.join(users)})",
                    host=self._name,
                )
            self.images[base] = wanted
            self.volumes.update((base, base_marker_name(base)))
            self.mutations.append(call)

    def create(self, spec: VmSpec) -> None:
        call = Call("create", spec.domain)
        self._enter(call)
        with self._lock:
            existing = self.domains.get(spec.domain)
            if existing is not None:
                if existing.state is not DomainState.RUNNING:
                    self.domains[spec.domain] = replace(existing, state=DomainState.RUNNING)
                    self.mutations.append(call)
                return
            recorded = self.images.get(spec.base_name)
            if recorded is None or (spec.image.sha256 and recorded != spec.image.sha256):
                raise PermanentError(
                    f"base image {spec.base_name} is not uploaded and verified; "
                    "the image must be ensured first",
                    host=self._name,
                )
            self.domains[spec.domain] = Domain(spec.domain, DomainState.RUNNING, spec.owner)
            self.specs[spec.domain] = spec
            self.overlays[spec.domain] = spec.base_name
            self.volumes.update((spec.overlay_name, spec.seed_name))
            self.uses[spec.domain] = frozenset((spec.overlay_name, spec.seed_name))
            if self.auto_ip and spec.domain not in self.addresses_of:
                self._next_ip += 1
                self.addresses_of[spec.domain] = (f"192.0.2.{self._next_ip}",)
            self.mutations.append(call)

    def start(self, domain: str) -> None:
        call = Call("start", domain)
        self._enter(call)
        with self._lock:
            existing = self._existing(domain, "virDomainLookupByName")
            # As the real adapter: shut off or crashed (destroyed first) starts, paused resumes.
            if existing.state in (DomainState.SHUTOFF, DomainState.CRASHED, DomainState.PAUSED):
                self.domains[domain] = replace(existing, state=DomainState.RUNNING, reason="")
                self.mutations.append(call)

    def set_owner(self, domain: str, owner: Owner) -> None:
        call = Call("set_owner", domain)
        self._enter(call)
        with self._lock:
            existing = self._existing(domain, "virDomainLookupByName")
            current = existing.owner
            identity = (owner.fleet, owner.proxy, owner.digest)
            if current is None or (current.fleet, current.proxy, current.digest) != identity:
                raise PermanentError(
                    f"refusing to rewrite the owner of domain {domain}: "
                    "its metadata is missing or names another VM",
                    host=self._name,
                )
            if current != owner:
                self.domains[domain] = replace(existing, owner=owner)
                self.mutations.append(call)

    def delete(self, domain: str) -> None:
        call = Call("delete", domain)
        self._enter(call)
        with self._lock:
            existing = self.domains.get(domain)
            if existing is not None and existing.owner is None:
                raise PermanentError(
                    f"refusing to delete domain {domain}: it carries no proxyfleet metadata",
                    host=self._name,
                )
            gone = [
                self.domains.pop(domain, None),
                self.overlays.pop(domain, None),
                self.specs.pop(domain, None),
            ]
            self.addresses_of.pop(domain, None)
            self.uses.pop(domain, None)
            owned = self.volumes & set(vm_volumes(domain))
            self.volumes -= owned
            if owned or any(item is not None for item in gone):
                self.mutations.append(call)

    def remove_volumes(self, domain: str, volumes: tuple[str, ...]) -> tuple[str, ...]:
        call = Call("remove_volumes", domain)
        self._enter(call)
        with self._lock:
            strange = [v for v in volumes if v not in vm_volumes(domain)]
            if strange:
                raise PermanentError(
                    f"refusing to remove {', '.join(strange)}: "
                    f"not a volume name of domain {domain}",
                    host=self._name,
                )
            if domain in self.domains:
                raise PermanentError(
                    f"refusing to remove the volumes of domain {domain}: the domain exists",
                    host=self._name,
                )
            users = sorted(d for d, used in self.uses.items() if used & set(volumes))
            if users:
                raise PermanentError(
                    f"refusing to remove the volumes of domain {domain}: in use by "
                    + "; ".join(f"domain {u}" for u in users),
                    host=self._name,
                )
            deleted = tuple(v for v in volumes if v in self.volumes)
            self.volumes -= set(deleted)
            if deleted:
                self.mutations.append(call)
            return deleted

    def remove_unused_base(self, base: str) -> tuple[str, ...]:
        call = Call("remove_unused_base", base)
        self._enter(call)
        with self._lock:
            if not is_base_volume(base):
                raise PermanentError(
                    f"refusing to remove {base}: not a base volume name", host=self._name
                )
            users = sorted(
                {d for d, used in self.overlays.items() if used == base}
                | {d for d, used in self.uses.items() if base in used}
            )
            if users:
                return ()
            deleted = tuple(v for v in (base_marker_name(base), base) if v in self.volumes)
            self.volumes -= set(deleted)
            self.images.pop(base, None)
            if deleted:
                self.mutations.append(call)
            return deleted

    def addresses(self, domain: str) -> tuple[str, ...]:
        self._enter(Call("addresses", domain))
        with self._lock:
            existing = self._existing(domain, "virDomainLookupByName")
            if existing.state is not DomainState.RUNNING:
                return ()
            return self.addresses_of.get(domain, ())

    def close(self) -> None:
        self._enter(Call("close"), inject=False)
        with self._lock:
            self.closed += 1

    def _existing(self, domain: str, rpc: str) -> Domain:
        existing = self.domains.get(domain)
        if existing is None:
            raise NotFoundError(
                f"domain {domain} does not exist",
                host=self._name,
                rpc=rpc,
                code=42,
                code_name="VIR_ERR_NO_DOMAIN",
            )
        return existing

    def _enter(self, call: Call, *, inject: bool = True) -> None:
        with self._lock:
            self.calls.append(call)
            failure = self._failures.take(call) if inject else None
            unreachable = self.unreachable and inject
        if self.on_call is not None:
            self.on_call(call)
        if unreachable:
            raise TransientError(f"cannot reach SSH at {self._name}: unreachable", host=self._name)
        if failure is not None:
            raise failure
        if self.latency and call.method in MUTATING:
            with self.in_flight, self.gauge:
                time.sleep(self.latency)
