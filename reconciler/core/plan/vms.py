"""The planner's vocabulary: an owned VM as observed, what a proxy is made of, a new VM."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

from reconciler.model import Domain, DomainRef, DomainState, Image, MachineType, Owner
from reconciler.model.plan import (
    Abandon,
    Action,
    Create,
    Delete,
    Keep,
    Keeper,
    NewVm,
    Replace,
    Start,
    block,
)

A = TypeVar("A", Keep, Start, Delete, Abandon)

PROTECTED = "protected (lifecycle.protect)"


@dataclass(frozen=True, slots=True)
class Made:
    """What a proxy's VMs are made of: its image and machine type, resolved once."""

    image: Image
    machine_type: MachineType


@dataclass(frozen=True, slots=True)
class OwnedVm:
    """A domain this fleet owns, on a reachable host of fleet.yaml."""

    proxy: str
    host: str
    name: str
    state: DomainState
    owner: Owner
    observed: Domain

    @property
    def digest(self) -> str:
        return self.owner.digest

    @property
    def protect(self) -> bool:
        """``lifecycle.protect`` as the VM's metadata records it."""
        return self.owner.protect

    @property
    def ref(self) -> DomainRef:
        return DomainRef(host=self.host, domain=self.name)

    def action(self, kind: type[A], reason: str) -> A:
        return kind(
            reason=reason,
            proxy=self.proxy,
            host=self.host,
            domain=self.name,
            digest=self.digest,
        )


def delete(
    vm: OwnedVm,
    reason: str,
    *,
    protect: bool,
    keeper: Keeper | None = None,
    recreate: bool = False,
) -> Action:
    """The delete of ``vm`` (see ``Delete``), blocked when its proxy is ``protect``-ed."""
    action = replace(vm.action(Delete, reason), keeper=keeper, recreate=recreate)
    return block(action, PROTECTED) if protect else action


def new_vm(
    proxy: str,
    host: str,
    *,
    domain: str,
    digest: str,
    vm: NewVm,
    reason: str,
    replaces: OwnedVm | None,
    heal: str,
) -> Create | Replace:
    """The CREATE of a VM placed on ``host`` and named ``domain``, or with ``replaces`` the
    REPLACE of that VM (``heal``: why one whose spec did not change is replaced)."""
    if replaces is None:
        return Create(reason=reason, proxy=proxy, host=host, domain=domain, digest=digest, vm=vm)
    why_new = heal or f"spec changed ({replaces.digest[:8]} -> {digest[:8]})"
    reason = (
        f"{why_new}: {reason}; "
        f"{replaces.name} on {replaces.host} is deleted in a later run, "
        "once the new VM is healthy"
    )
    return Replace(
        reason=reason,
        proxy=proxy,
        host=host,
        domain=domain,
        digest=digest,
        vm=vm,
        replaces=replaces.ref,
        heal=bool(heal),
    )
