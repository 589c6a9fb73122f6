"""A plan: what the planner decided, one typed action per proxy, VM or safety stop.

Each kind of action is its own frozen type and carries what the planner
resolved for it, so that the executor carries it out without looking anything
up again: a ``Create`` or ``Replace`` holds the whole ``NewVm`` (host, image,
machine type, cloud-init), a ``Delete`` the VM that must be healthy before it
goes, a ``Relabel`` the ownership record to write, a ``Cleanup`` the volumes, a
``RemoveBase`` the base image.

Every action shares the header of ``Action``: ``reason``, and where it speaks
about one VM, ``proxy``, ``host``, ``domain`` and ``digest``. ``kind`` is a
class constant, so ``plan --json`` and the status keep their shape.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from reconciler.model.fleet import (
    CloudInit,
    FixedAddress,
    HealthCheck,
    Host,
    Image,
    MachineType,
    Proxy,
)
from reconciler.model.inventory import Owner
from reconciler.model.vm import VmSpec, base_volume_name


class ActionKind(StrEnum):
    CREATE = "create"
    KEEP = "keep"
    START = "start"
    RELABEL = "relabel"
    REPLACE = "replace"
    DELETE = "delete"
    BLOCKED = "blocked"
    ABANDON = "abandon"
    CLEANUP = "cleanup"
    """Remove volumes named as this fleet's VMs that no domain on their host uses: what a
    create interrupted (SIGKILL) before its define leaves behind."""


MUTATING = frozenset(
    {
        ActionKind.CREATE,
        ActionKind.START,
        ActionKind.RELABEL,
        ActionKind.REPLACE,
        ActionKind.DELETE,
        ActionKind.CLEANUP,
    }
)


@dataclass(frozen=True, slots=True)
class DomainRef:
    host: str
    domain: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NewVm:
    """Everything a new VM is made of, as the planner resolved it from the repo.

    The executor adds only what the run learns (the image's verified sha256,
    the revision, the creation time) when it builds the host's ``VmSpec``.
    """

    fleet: str
    proxy: str
    host: Host
    image: Image
    machine_type: MachineType
    cloud_init: CloudInit
    install_guest_agent: bool
    protect: bool
    health: HealthCheck
    network: FixedAddress | None = None

    @classmethod
    def of(
        cls, fleet: str, proxy: Proxy, host: Host, image: Image, machine_type: MachineType
    ) -> NewVm:
        """The new VM of ``proxy`` on ``host``, with its manifest's image and machine type."""
        return cls(
            fleet=fleet,
            proxy=proxy.name,
            host=host,
            image=image,
            machine_type=machine_type,
            cloud_init=proxy.cloud_init,
            install_guest_agent=proxy.install_guest_agent,
            protect=proxy.lifecycle.protect,
            health=proxy.health,
            network=proxy.network,
        )

    def spec(
        self, *, domain: str, digest: str, image_sha256: str, revision: str, created: str
    ) -> VmSpec:
        """The host's ``VmSpec`` of this VM, with what the run learned: the image's verified
        sha256, the revision and the creation time (ISO 8601)."""
        return VmSpec(
            domain=domain,
            proxy=self.proxy,
            host=self.host,
            image=self.image,
            machine_type=self.machine_type,
            cloud_init=self.cloud_init,
            install_guest_agent=self.install_guest_agent,
            network=self.network,
            owner=Owner(
                fleet=self.fleet,
                proxy=self.proxy,
                digest=digest,
                image_key=self.image.key,
                image_sha256=image_sha256,
                image_base=base_volume_name(self.image),
                revision=revision,
                created=created,
                protect=self.protect,
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Keeper:
    """The VM a proxy keeps: a delete of another VM of that proxy waits for its health."""

    host: str
    domain: str
    health: HealthCheck


@dataclass(frozen=True, slots=True, kw_only=True)
class Action:
    """The header every action shares. Never built itself: one of the kinds below is."""

    kind: ClassVar[ActionKind]
    reason: str
    proxy: str | None = None
    host: str | None = None
    domain: str | None = None
    digest: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Keep(Action):
    """An owned VM stays as it is (``reason`` says why when it is not simply up to date)."""

    kind: ClassVar[ActionKind] = ActionKind.KEEP
    up_to_date: bool = False
    """True when the VM is as the repo wants it: nothing to do and nothing to report, so the
    plan listing leaves it out and the status gives no detail. False when it stays although
    it is not right (shut off under drift: detect, paused, crashed, a healing verdict)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Start(Action):
    """Start an owned VM that is shut off or crashed (drift: correct)."""

    kind: ClassVar[ActionKind] = ActionKind.START


@dataclass(frozen=True, slots=True, kw_only=True)
class Relabel(Action):
    """Write ``owner`` (the VM's own record with only ``protect`` changed) into the VM."""

    kind: ClassVar[ActionKind] = ActionKind.RELABEL
    owner: Owner


@dataclass(frozen=True, slots=True, kw_only=True)
class Create(Action):
    """Make ``vm`` as ``domain`` on ``host``."""

    kind: ClassVar[ActionKind] = ActionKind.CREATE
    vm: NewVm


@dataclass(frozen=True, slots=True, kw_only=True)
class Replace(Action):
    """Make ``vm`` beside ``replaces``, which a later plan deletes once the new VM passed a
    health check (the run that makes it never waits for it).

    ``batch`` is the rollout batch of the proxy's zone: always 1 in a plan (the
    planner blocks the later batches' replaces until the earlier ones are done);
    kept for ``plan --json``. ``heal`` marks a replace of a VM with an unchanged
    spec (self-healing, a hand edit): it gets a new name.
    """

    kind: ClassVar[ActionKind] = ActionKind.REPLACE
    vm: NewVm
    replaces: DomainRef
    batch: int = 1
    heal: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Delete(Action):
    """Delete an owned VM; with ``keeper``, only once that VM of the proxy is healthy."""

    kind: ClassVar[ActionKind] = ActionKind.DELETE
    keeper: Keeper | None = None
    recreate: bool = False
    """The first half of a recreate (a fixed-address proxy's replace, destroy-then-create):
    a later plan creates the proxy's new VM once this one is gone."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cleanup(Action):
    """Remove ``volumes`` of ``domain``, a domain that does not exist, and nothing else."""

    kind: ClassVar[ActionKind] = ActionKind.CLEANUP
    volumes: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class RemoveBase(Action):
    """Remove the unused base image ``base`` from ``host``; the host keeps it when a domain
    uses it after all. ``volumes`` are the base and its marker, those the pool holds."""

    kind: ClassVar[ActionKind] = ActionKind.CLEANUP
    base: str
    volumes: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Blocked(Action):
    """A mutating action (``blocks``) that a safety rule stopped; ``reason`` names the rule.

    ``replaces`` is the VM a blocked replace would have replaced (it still serves);
    ``owner`` the record a blocked relabel would have written; ``volumes`` those
    a blocked cleanup would have removed.
    """

    kind: ClassVar[ActionKind] = ActionKind.BLOCKED
    blocks: ActionKind
    replaces: DomainRef | None = None
    owner: Owner | None = None
    volumes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Abandon(Action):
    """An owned VM on a host that left fleet.yaml: reported, never touched."""

    kind: ClassVar[ActionKind] = ActionKind.ABANDON


def replaced(action: Action) -> DomainRef | None:
    """The old VM of a replace, planned or blocked; None for every other action."""
    if isinstance(action, Replace | Blocked):
        return action.replaces
    return None


def block(action: Action, reason: str) -> Blocked:
    """The same action, stopped by a safety rule."""
    if isinstance(action, Blocked):
        return replace(action, reason=reason)
    return Blocked(
        reason=reason,
        proxy=action.proxy,
        host=action.host,
        domain=action.domain,
        digest=action.digest,
        blocks=action.kind,
        replaces=replaced(action),
        owner=action.owner if isinstance(action, Relabel) else None,
        volumes=action.volumes if isinstance(action, Cleanup | RemoveBase) else (),
    )


def blocked_kind(action: Action) -> ActionKind | None:
    """The kind a blocked action stopped; None for an action that is not blocked."""
    return action.blocks if isinstance(action, Blocked) else None


@dataclass(frozen=True, slots=True)
class Halt:
    """A replace whose new VM did not pass a health check within the replace timeout: the
    rollout of ``revision`` stops while it holds (a new commit resumes)."""

    revision: str
    proxy: str
    domain: str
    reason: str
    since: datetime


@dataclass(frozen=True, slots=True)
class Plan:
    actions: tuple[Action, ...] = ()
    suspect_zones: tuple[str, ...] = ()
    """Zones where at least half the proxies fail their probe at once: the probe path is
    suspect, so none of them is replaced for it."""
    paused: tuple[DomainRef, ...] = ()
    """Owned VMs the hypervisor paused on an I/O error (a full pool, most often)."""
    halts: tuple[Halt, ...] = ()
    """Every failed replace of the revision planned, by proxy: the earlier ones the history
    holds and those whose deadline this plan found passed. Any halt blocks every replace."""

    def summary(self) -> dict[str, int]:
        counts = Counter(a.kind for a in self.actions)
        return {kind.value: counts.get(kind, 0) for kind in ActionKind}

    @property
    def has_changes(self) -> bool:
        """True when anything but keep/abandon is planned (``plan`` exits 2)."""
        return any(a.kind not in (ActionKind.KEEP, ActionKind.ABANDON) for a in self.actions)

    def of_kind(self, kind: ActionKind) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.kind == kind)

    def blocked(self) -> tuple[Blocked, ...]:
        return tuple(a for a in self.actions if isinstance(a, Blocked))
