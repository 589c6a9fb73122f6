"""Volumes of VMs that never were: a create killed before its define leaves them behind."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping

from reconciler.core.naming import volume_domain
from reconciler.model.plan import Action, Cleanup
from reconciler.model.vm import vm_volumes


def leftover_cleanups(
    actions: list[Action],
    *,
    fleet: str,
    pool_volumes: Mapping[str, tuple[str, ...]],
    taken: Mapping[str, Mapping[str, bool]],
    fleets: Mapping[str, set[str]],
    wanted_domain: Callable[[str, str], str | None],
) -> list[Action]:
    """A CLEANUP per domain name whose volumes are this fleet's and nobody's.

    A volume qualifies only when ``volume_domain`` reads it as a VM volume
    of this fleet, no domain of that name exists on its host (owned or
    foreign), no action of this plan names that domain there (a create, a
    blocked one, a replace), no proxy of the repo would get that domain on
    that host, and no other fleet seen on the host can produce the name
    (fleet ``home-a`` names ``pf-home-a-...``, which reads as ours for
    ``home``). Unreachable hosts and hosts missing from fleet.yaml are
    never looked at. The executor confirms on the host before it deletes.
    """
    named = {(a.host, a.domain) for a in actions if a.host and a.domain}
    cleanups: list[Action] = []
    for host in sorted(pool_volumes):
        leftovers: dict[str, list[str]] = defaultdict(list)
        for volume in sorted(set(pool_volumes[host])):
            found = volume_domain(fleet, volume)
            if found is None:
                continue
            domain, proxy = found
            if domain in taken[host] or (host, domain) in named:
                continue
            if any(domain.startswith(f"pf-{other}-") for other in fleets[host]):
                continue
            if wanted_domain(proxy, host) == domain:
                continue
            leftovers[domain].append(volume)
        for domain, names in sorted(leftovers.items()):
            volumes = [v for v in vm_volumes(domain) if v in names]  # overlay, then seed
            reason = (
                f"no domain uses {', '.join(volumes)}; "
                "left by a create interrupted before its define"
            )
            cleanups.append(
                Cleanup(reason=reason, host=host, domain=domain, volumes=tuple(volumes))
            )
    return cleanups
