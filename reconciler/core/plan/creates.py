"""A new VM for a proxy: placed, named and counted into the plan's load, or why it cannot be.

``new_vm_action`` is the one place a CREATE or a REPLACE is made. It asks, in
order: is the proxy protected (a replace), could a VM of it already run on an
unreachable host, does its name clash on a candidate host, is there room; then
counts the new VM into ``placement``'s load and room, so the next proxy of the
same plan sees them.
"""

from __future__ import annotations

from functools import partial

from reconciler.core.naming import MAX_DOMAIN_NAME, domain_name
from reconciler.core.plan.gates import PROTECTED
from reconciler.core.plan.index import PlanIndex
from reconciler.core.plan.names import new_name
from reconciler.core.plan.placement import Placement
from reconciler.core.plan.vms import Made, OwnedVm, new_vm
from reconciler.model import ActionKind, Proxy
from reconciler.model.plan import Action, Blocked, NewVm


def new_vm_action(
    index: PlanIndex,
    placement: Placement,
    proxy: Proxy,
    made: Made,
    *,
    prefer: str | None,
    replaces: OwnedVm | None,
    heal: str = "",
) -> Action:
    """A CREATE (or, with ``replaces``, a REPLACE) placed and named, or why it cannot be.

    ``heal`` is why a VM whose spec did not change is replaced: its successor
    takes the first generation of the name that is free on every candidate host.
    """
    kind = ActionKind.CREATE if replaces is None else ActionKind.REPLACE
    old = replaces.ref if replaces is not None else None

    def stop(
        reason: str, host: str | None = None, domain: str | None = None, digest: str = ""
    ) -> Blocked:
        return Blocked(
            reason=reason,
            proxy=proxy.name,
            host=host,
            domain=domain,
            digest=digest or None,
            blocks=kind,
            replaces=old,
        )

    if replaces is not None and proxy.lifecycle.protect:
        return stop(PROTECTED)
    unknown = placement.unreachable_for(proxy)
    if unknown is not None:
        what = "its VM" if replaces is None else "a replacement"
        return stop(f"host {unknown} is unreachable; {what} may already run there")
    fleet = index.fleet.name
    clash, generation = new_name(
        fleet,
        proxy.name,
        heal=bool(heal),
        targets=placement.targets(proxy),
        reachable=index.reachable,
        digest_on=partial(index.digest, proxy, made),
        taken=index.observed.taken,
    )
    if clash is not None:
        host, name, digest, holder = clash
        return stop(
            f"the domain name is held by {holder} on {host}", host=host, domain=name, digest=digest
        )
    placed, why = placement.place(proxy, made, prefer=prefer)
    if placed is None:
        return stop(why)
    host = placed
    digest = index.digest(proxy, made, host)
    name = domain_name(fleet, proxy.name, digest, generation)
    if len(name) > MAX_DOMAIN_NAME:
        too_long = f"domain name is longer than {MAX_DOMAIN_NAME} characters"
        return stop(too_long, host=host, domain=name, digest=digest)
    note = placement.room.base_note(host, made.image)
    placement.load[host] += 1
    placement.room.take(host, made.machine_type, made.image)
    vm = NewVm.of(fleet, proxy, index.hosts[host], made.image, made.machine_type)
    reason = f"new VM {why}" + (f"; {note}" if note else "")
    return new_vm(
        proxy.name,
        host,
        domain=name,
        digest=digest,
        vm=vm,
        reason=reason,
        replaces=replaces,
        heal=heal,
    )
