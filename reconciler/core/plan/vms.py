"""The planner's vocabulary: an owned VM as observed, what a proxy is made of."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TypeVar

from reconciler.model import Domain, DomainRef, DomainState, Image, MachineType, Owner
from reconciler.model.plan import Abandon, Action, Delete, Keep, Keeper, Start, block

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
