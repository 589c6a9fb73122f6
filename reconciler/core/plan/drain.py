"""Cordon and drain: a host's ``state`` in fleet.yaml, as ``kubectl cordon`` and ``drain``.

Pure. A ``cordoned`` or ``draining`` host takes no new VM: placement leaves it
out of the candidates (``closed`` says which were left out, for the reason a
create finds no host). A VM on a ``draining`` host counts as stale though its
spec did not change (``leaving``), so the planner replaces it the way it
replaces any stale VM: a new VM on another host of the proxy's zone, created by
a ``Replace`` paced into the zone's rollout batches (``policy.rollout``), and
the old VM deleted in a later run, only once the new one passed its health
check (reconciler.core.plan.handover). Nothing here deletes: a drain with no
room elsewhere leaves the replace blocked, with the reason, and every VM where
it runs. ``active`` (the default) undoes both.

Like a heal, a drain replace keeps the spec, so its new VM takes the first
generation of the name that is free on every candidate host: the old VM still
holds the plain name on the draining host.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reconciler.model.fleet import Host, HostState


def draining(hosts: Mapping[str, Host]) -> frozenset[str]:
    """The hosts of fleet.yaml whose VMs are to move elsewhere."""
    return frozenset(name for name, host in hosts.items() if host.state is HostState.DRAINING)


def leaving(host: str, draining_hosts: frozenset[str]) -> str:
    """Why a VM on ``host`` is replaced though its spec is unchanged; "" when it stays."""
    return f"host {host} is draining" if host in draining_hosts else ""


def closed(candidates: Iterable[str], hosts: Mapping[str, Host]) -> str:
    """The candidates that take no new VM, with their state ("kvm01 is cordoned, kvm02 is
    draining"); "" when every one does."""
    return ", ".join(
        f"{name} is {hosts[name].state}" for name in candidates if not hosts[name].schedulable
    )
