"""The kept VM of a proxy: kept, started, resumed or reported, by state and healing verdict."""

from __future__ import annotations

from reconciler.core.plan.capacity import GIB
from reconciler.core.plan.healing import Cure, Verdict
from reconciler.core.plan.vms import OwnedVm
from reconciler.model import ActionKind, DomainState, DriftMode
from reconciler.model.plan import Action, Blocked, Keep, Start, block

RESUME_ROOM = GIB
"""Free pool space at which a VM paused on an I/O error is resumed."""


def kept_vm_action(
    vm: OwnedVm,
    verdict: Verdict | None,
    *,
    proxy: str,
    drift: DriftMode,
    pool: str,
    free: int | None,
) -> Action:
    """What becomes of the kept VM of ``proxy`` when healing does not replace it: keep, start,
    hold (a replace the day-2 rules stopped) or report, by its state and ``verdict``.

    ``pool`` and ``free`` are its host's pool and free bytes (None: unknown)."""
    if verdict is not None:
        if verdict.cure is Cure.START:
            return vm.action(Start, verdict.reason)
        if verdict.cure is Cure.HOLD:
            return block(
                Blocked(reason="", proxy=proxy, blocks=ActionKind.REPLACE, replaces=vm.ref),
                verdict.reason,
            )
        return vm.action(Keep, verdict.reason)
    state = vm.state
    if state is DomainState.RUNNING:
        return Keep(
            reason="up to date",
            proxy=vm.proxy,
            host=vm.host,
            domain=vm.name,
            digest=vm.digest,
            up_to_date=True,
        )
    if state is DomainState.SHUTOFF:
        if drift is DriftMode.CORRECT:
            return vm.action(Start, "shut off; drift: correct starts it")
        return vm.action(Keep, "shut off; drift: detect only reports it")
    if state is DomainState.PAUSED and vm.observed.reason == "ioerror":
        return _paused_by_io_error(vm, drift=drift, pool=pool, free=free)
    if state is DomainState.PAUSED:
        return vm.action(Keep, "paused; left as it is (resume it by hand)")
    if state is DomainState.CRASHED:
        return vm.action(Keep, "crashed; left for inspection")
    return vm.action(Keep, f"in state {state.value}; left as it is")


def _paused_by_io_error(vm: OwnedVm, *, drift: DriftMode, pool: str, free: int | None) -> Action:
    """A VM the hypervisor paused on an I/O error (a full pool, most often): resumed under
    drift: correct once its pool has ``RESUME_ROOM`` free again, else reported."""
    what = "paused by the hypervisor (I/O error)"
    if free is None:
        room, has_room = f"free space of pool {pool} unknown", False
    else:
        room, has_room = f"pool {pool} has {free / GIB:.1f} GiB free", free >= RESUME_ROOM
    if drift is not DriftMode.CORRECT:
        return vm.action(Keep, f"{what}; {room}; drift: detect only reports it")
    if not has_room:
        return vm.action(Keep, f"{what}; {room}; resumed once it has {RESUME_ROOM // GIB} GiB")
    return vm.action(Start, f"{what}; {room}; drift: correct resumes it")
