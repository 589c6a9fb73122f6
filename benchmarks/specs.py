"""What the benchmarks render with proxyfleet's own code: one ``VmSpec`` per proxy of a repo.

Rows that create or define domains without proxyfleet (row 1's populated
host, row 7's fleet, row 2's physical floor) build the very specs the
executor would, so that the domain XML, the volumes and the seed ISO are
proxyfleet's byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable

from reconciler.core.naming import domain_name, resolve_image
from reconciler.core.plan.digest import proxy_digest
from reconciler.model import Repo
from reconciler.model.plan import NewVm
from reconciler.model.vm import VmSpec


def vm_specs(
    repo: Repo,
    host_name: str | None = None,
    *,
    name: Callable[[str, str], str] | None = None,
) -> list[VmSpec]:
    """The spec of every proxy pinned to ``host_name`` (``placement.host``, or the only host of
    its zone), or of all on the
    fleet's first host. ``name(proxy, digest)``: the domain name (proxyfleet's by default)."""
    fleet = repo.fleet
    host = fleet.hosts[0] if host_name is None else fleet.host(host_name)
    assert host is not None
    specs = []
    alone = {  # zone -> its one host: an unpinned proxy of such a zone can only go there
        zone: names[0]
        for zone in {h.zone for h in fleet.hosts}
        if len(names := [h.name for h in fleet.hosts if h.zone == zone]) == 1
    }
    for proxy in repo.proxies:
        where = proxy.placement.host or alone.get(proxy.placement.zone)
        if host_name is not None and where != host_name:
            continue
        image = resolve_image(fleet, proxy.placement.image)
        machine = fleet.machine_type(proxy.placement.machine_type)
        assert image is not None and machine is not None
        digest = proxy_digest(proxy, host, image=image, machine_type=machine)
        vm = NewVm.of(fleet.name, proxy, host, image, machine)
        specs.append(
            vm.spec(
                domain=(name or (lambda p, d: domain_name(fleet.name, p, d)))(proxy.name, digest),
                digest=digest,
                image_sha256=image.sha256 or "",
                revision="0" * 40,
                created="2026-11-30T00:00:00+00:00",
            )
        )
    return specs
