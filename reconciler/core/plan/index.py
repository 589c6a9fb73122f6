"""What one planning pass looks things up in, built once per plan.

``PlanIndex`` holds fleet.yaml's hosts by name and by zone, the reachable ones,
the manifests by name, the inventory sorted for this fleet (``observed``) and the
memos many rules share: each proxy's image and machine type, its digest on each
host, and its VMs split into current and stale. Every rule that asks gets the
same answer within a plan; nothing here outlives it (``Digests``, passed in, is
the caller's memo across plans).
"""

from __future__ import annotations

from collections import defaultdict
from functools import partial

from reconciler.core.naming import domain_name, resolve_image
from reconciler.core.plan.digest import Digests, proxy_digest
from reconciler.core.plan.drain import draining
from reconciler.core.plan.observed import observe
from reconciler.core.plan.vms import Made, OwnedVm
from reconciler.model import Host, Inventory, Proxy, Repo


class PlanIndex:
    """The lookups of one plan over ``repo`` and ``inventory``; ``memo``: earlier plans' digests."""

    def __init__(self, repo: Repo, inventory: Inventory, *, memo: Digests) -> None:
        self.fleet = repo.fleet
        self.hosts: dict[str, Host] = {h.name: h for h in self.fleet.hosts}
        self.draining = draining(self.hosts)
        self.zones: dict[str, list[str]] = defaultdict(list)
        for host in sorted(self.hosts.values(), key=lambda h: h.name):
            self.zones[host.zone].append(host.name)
        self.reachable = frozenset(
            h.name for h in inventory.hosts if h.reachable and h.name in self.hosts
        )
        self.manifests: dict[str, Proxy] = {p.name: p for p in repo.proxies}
        self.observed = observe(inventory, fleet=self.fleet.name, hosts=self.hosts)
        self._digest_of = partial(proxy_digest, memo=memo)
        self._made: dict[tuple[str, str], Made | None] = {}  # (image, machine type) -> Made
        self._digests: dict[tuple[str, str], str] = {}  # (proxy, host) -> digest
        self._split: dict[str, tuple[list[OwnedVm], list[OwnedVm]]] = {}  # proxy -> split

    def made(self, proxy: Proxy) -> Made | None:
        """The proxy's image and machine type, resolved once per plan per pair of keys."""
        keys = (proxy.placement.image, proxy.placement.machine_type)
        if keys not in self._made:
            image = resolve_image(self.fleet, keys[0])
            machine_type = self.fleet.machine_type(keys[1])
            found = None if image is None or machine_type is None else Made(image, machine_type)
            self._made[keys] = found
        return self._made[keys]

    def digest(self, proxy: Proxy, made: Made, host: str) -> str:
        """The digest of ``proxy`` on ``host``, computed once per plan (many rules ask)."""
        key = (proxy.name, host)
        if key not in self._digests:
            self._digests[key] = self._digest_of(
                proxy, self.hosts[host], image=made.image, machine_type=made.machine_type
            )
        return self._digests[key]

    def split(self, proxy: Proxy, made: Made) -> tuple[list[OwnedVm], list[OwnedVm]]:
        """The proxy's VMs current on their host (not a draining one), and the stale ones."""
        found = self._split.get(proxy.name)
        if found is None:
            current: list[OwnedVm] = []
            stale: list[OwnedVm] = []
            for vm in self.observed.owned.get(proxy.name, ()):
                same = vm.digest == self.digest(proxy, made, vm.host)
                same = same and vm.host not in self.draining
                (current if same else stale).append(vm)
            found = self._split[proxy.name] = (current, stale)
        return found

    def wanted_domain(self, proxy_name: str, host: str) -> str | None:
        """The domain a VM of ``proxy_name`` would get on ``host`` now (None: no manifest)."""
        proxy = self.manifests.get(proxy_name)
        made = self.made(proxy) if proxy is not None else None
        if proxy is None or made is None:
            return None
        return domain_name(self.fleet.name, proxy.name, self.digest(proxy, made, host))
