"""A new VM's domain name on the hosts it may go to: taken (by whom), or the next free one."""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping

from reconciler.core.naming import domain_name

Taken = Mapping[str, Mapping[str, bool]]
"""host -> domain name -> True when a foreign domain holds it."""


def free_generation(
    fleet: str, proxy: str, *, targets: Iterable[str], digest_on: Callable[[str], str], taken: Taken
) -> int:
    """The first generation >= 1 whose name is free on every host ``proxy`` may go to."""
    generation = 1
    while any(domain_name(fleet, proxy, digest_on(h), generation) in taken[h] for h in targets):
        generation += 1
    return generation


def name_clash(
    fleet: str,
    proxy: str,
    generation: int,
    *,
    targets: Iterable[str],
    reachable: Collection[str],
    digest_on: Callable[[str], str],
    taken: Taken,
) -> tuple[str, str, str, str] | None:
    """(host, name, digest, holder) when the name the new VM would get on any host it
    may go to is taken there; None when it is free everywhere.

    Checked over every candidate host, not just the one placement picks, so
    that the block does not come and go with the load of the zone: a
    foreign domain under our name may be our VM without its metadata.
    """
    for host in targets:
        if host not in reachable:
            continue
        digest = digest_on(host)
        name = domain_name(fleet, proxy, digest, generation)
        if name not in taken[host]:
            continue
        holder = "a foreign domain" if taken[host][name] else "another VM of this fleet"
        return host, name, digest, holder
    return None


def new_name(
    fleet: str,
    proxy: str,
    *,
    heal: bool,
    targets: list[str],
    reachable: Collection[str],
    digest_on: Callable[[str], str],
    taken: Taken,
) -> tuple[tuple[str, str, str, str] | None, int]:
    """The clash (see ``name_clash``) and the generation of a new VM's name: 0, or for a
    heal (a VM replaced though its spec did not change) the first one free everywhere."""
    generation = (
        free_generation(fleet, proxy, targets=targets, digest_on=digest_on, taken=taken)
        if heal
        else 0
    )
    clash = name_clash(
        fleet,
        proxy,
        generation,
        targets=targets,
        reachable=reachable,
        digest_on=digest_on,
        taken=taken,
    )
    return clash, generation
