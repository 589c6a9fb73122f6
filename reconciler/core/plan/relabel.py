"""Protect, recorded in the VMs that stay: a RELABEL after each action that keeps a VM whose
recorded ``lifecycle.protect`` differs from its manifest's."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from reconciler.core.plan.vms import OwnedVm
from reconciler.model import ActionKind, Proxy
from reconciler.model.plan import Action, Blocked, Keep, Relabel, Start, replaced

START, REPLACE, DELETE = ActionKind.START, ActionKind.REPLACE, ActionKind.DELETE


def record_protect(
    actions: list[Action], *, vms: Mapping[tuple[str, str], OwnedVm], manifests: Mapping[str, Proxy]
) -> list[Action]:
    """Each action that leaves a VM of a proxy with a manifest in place, followed by a
    RELABEL when the VM's recorded protect differs from the manifest's.

    Run after the delete gates, so that a VM whose delete a gate held back
    is relabelled too; before suspend, which blocks relabels like any
    mutating action. A VM this plan deletes, or replaces, is left as it is.
    """
    result: list[Action] = []
    for action in actions:
        result.append(action)
        vm = _staying(action, vms)
        manifest = manifests.get(vm.proxy) if vm is not None else None
        if vm is None or manifest is None:
            continue
        protect = manifest.lifecycle.protect
        if vm.protect != protect:
            why = f"protect: {_flag(vm.protect)} -> {_flag(protect)} in the VM's metadata"
            owner = replace(vm.owner, protect=protect)
            result.append(
                Relabel(
                    reason=why,
                    proxy=vm.proxy,
                    host=vm.host,
                    domain=vm.name,
                    digest=vm.digest,
                    owner=owner,
                )
            )
    return result


def _staying(action: Action, vms: Mapping[tuple[str, str], OwnedVm]) -> OwnedVm | None:
    """The owned VM that ``action`` leaves in place, if it speaks about one."""
    stopped = action.blocks if isinstance(action, Blocked) else None
    if isinstance(action, Keep | Start) or stopped in (START, DELETE):
        return vms.get((action.host or "", action.domain or ""))
    old = replaced(action)
    if stopped is REPLACE and old is not None:
        return vms.get((old.host, old.domain))
    return None


def _flag(value: bool) -> str:
    return "true" if value else "false"
