"""The planner: desired state + inventory -> Plan. Pure: no I/O, no clock, no randomness.

``plan(repo, inventory)`` decides, for every proxy and every owned VM, one
action: create, keep, start, replace, delete, blocked (a safety rule stopped a
mutating action; ``blocks`` says which) or abandon. This module walks the
proxies and holds the pass's state; each rule lives in a module of its own in
this package:

- ``observed``: what the inventory says about this fleet (its VMs, names taken,
  volumes, other fleets; VMs on hosts gone from fleet.yaml are abandoned);
- ``keep`` (with ``healing``): the kept VM kept, started, resumed or healed;
- ``placement`` (with ``capacity``) and ``names``: where a new VM goes, its name;
- ``drain``: cordoned and draining hosts take no new VM; a draining one's VMs are stale;
- ``rollout``: every replace paced into batches per zone, or held while halted;
  ``recreate``: a fixed-address proxy's replace, destroy-then-create, paced likewise;
- ``gates``: VMs without a manifest, an empty desired set, maxDeletesPerRun;
- ``relabel``: a VM that stays and whose recorded protect flag differs from its
  manifest's gets a relabel right after its own action;
- ``leftovers`` and ``bases``: volumes of creates killed before their define, and
  base images nothing needs, get a cleanup.

The day-2 rules need what earlier runs saw: ``history``. The policy is
``repo.fleet.policy``. docs/planning.md is the operator's description of every
rule and reason text; tests/plan_cases/ hold one case per rule.

The order of the plan is part of its contract (the CLI prints it, tests pin
it): proxies by name, each with its actions (the kept VM or the replace first,
then duplicates, then older VMs, each group by domain name and host); then VMs
whose manifest is gone, by host and domain; then abandoned VMs, by host and
domain; then cleanups, by host and domain; then base cleanups, by host and
base. A relabel directly follows the action of the VM it concerns.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from functools import partial

from reconciler.core.naming import MAX_DOMAIN_NAME, domain_name, resolve_image
from reconciler.core.plan.bases import unused_bases
from reconciler.core.plan.capacity import Room
from reconciler.core.plan.digest import Digests, proxy_digest
from reconciler.core.plan.drain import draining, leaving
from reconciler.core.plan.gates import PROTECTED, gate_deletes, orphan
from reconciler.core.plan.handover import Handover, handover, preference
from reconciler.core.plan.healing import Cure, judge, suspect_zones
from reconciler.core.plan.keep import kept_vm_action
from reconciler.core.plan.leftovers import leftover_cleanups
from reconciler.core.plan.names import new_name
from reconciler.core.plan.observed import observe
from reconciler.core.plan.placement import Placement
from reconciler.core.plan.recreate import first_half, is_down
from reconciler.core.plan.relabel import record_protect
from reconciler.core.plan.rollout import pace
from reconciler.core.plan.vms import Made, OwnedVm, delete, new_vm
from reconciler.model import ActionKind, DomainState, Host, Inventory, Plan, Proxy, Repo
from reconciler.model.history import History
from reconciler.model.limits import Limits
from reconciler.model.plan import (
    MUTATING,
    Action,
    Blocked,
    Delete,
    Keep,
    Keeper,
    NewVm,
    block,
)

CREATE, START = ActionKind.CREATE, ActionKind.START
REPLACE, DELETE = ActionKind.REPLACE, ActionKind.DELETE

SUSPENDED = "the fleet is suspended (policy.suspend)"
UNRESOLVED = "its image or machine type does not resolve in fleet.yaml"


def plan(
    repo: Repo,
    inventory: Inventory,
    history: History | None = None,
    limits: Limits | None = None,
    *,
    memo: Digests | None = None,
) -> Plan:
    """Diff ``repo`` against ``inventory`` under ``repo.fleet.policy``, with what earlier runs
    saw (``history``; none: the day-2 rules that need the past do not fire), the box's bounds
    (``limits``: a new VM's deadline, the delete window's budget) and ``memo``'s digests."""
    digests = memo if memo is not None else Digests()
    return _Planner(repo, inventory, history or History(), limits or Limits(), digests).run()


class _Planner:
    """One planning pass. Its state (host load) lives only as long as ``plan`` runs."""

    def __init__(
        self, repo: Repo, inventory: Inventory, history: History, limits: Limits, memo: Digests
    ) -> None:
        self.repo = repo
        self.history = history
        self.limits = limits
        self.halts = {h.proxy: h for h in history.halts}  # and those this plan finds
        self.fleet = repo.fleet
        self.policy = repo.fleet.policy
        self.hosts: dict[str, Host] = {h.name: h for h in self.fleet.hosts}
        self.draining = draining(self.hosts)
        self.zones: dict[str, list[str]] = defaultdict(list)
        for host in sorted(self.hosts.values(), key=lambda h: h.name):
            self.zones[host.zone].append(host.name)
        self.reachable = frozenset(
            h.name for h in inventory.hosts if h.reachable and h.name in self.hosts
        )
        self.manifests: dict[str, Proxy] = {p.name: p for p in repo.proxies}
        self.in_flight: Counter[str] = Counter()  # zone -> proxies finishing a replace
        self.down: dict[str, set[str]] = defaultdict(set)  # zone -> fixed proxies not serving
        self.digests: dict[tuple[str, str], str] = {}  # (proxy, host) -> digest, per plan
        self.digest_of = partial(proxy_digest, memo=memo)  # memo: digests of earlier plans
        self.made: dict[tuple[str, str], Made | None] = {}  # (image, machine type) -> Made
        self.split: dict[str, tuple[list[OwnedVm], list[OwnedVm]]] = {}  # see _split
        self.room = Room(inventory, self.policy.overcommit)
        seen = observe(inventory, fleet=self.fleet.name, hosts=self.hosts)
        self.owned, self.vms, self.taken = seen.owned, seen.vms, seen.taken
        self.load, self.abandoned = seen.load, seen.abandoned  # load: creates planned are added
        self.volumes, self.fleets = seen.volumes, seen.fleets
        self.placement = Placement(
            self.hosts, self.zones, reachable=self.reachable, load=self.load, room=self.room
        )
        self.suspect = suspect_zones(self._kept_running, history)

    def _preference(self, vm: OwnedVm) -> tuple[bool, bool, bool, str, str]:
        return preference(vm, self.history)

    def _kept_running(self) -> dict[str, list[tuple[str, str] | None]]:
        """Zone -> each proxy's kept VM as (host, domain) when it runs, else None."""
        zones: dict[str, list[tuple[str, str] | None]] = defaultdict(list)
        for proxy in self.repo.proxies:
            made = self._made(proxy)
            current = self._split(proxy, made)[0] if made is not None else []
            up = [vm for vm in current if vm.state is DomainState.RUNNING]
            kept = up[0] if len(up) == 1 else min(up, key=self._preference, default=None)
            zones[proxy.placement.zone].append((kept.host, kept.name) if kept else None)
        return zones

    def run(self) -> Plan:
        proposed: list[Action] = []
        for proxy in sorted(self.repo.proxies, key=lambda p: p.name):
            proposed.extend(self._proxy(proxy))
        desired = {p.name for p in self.repo.proxies}
        orphans = [vm for name, vms in self.owned.items() if name not in desired for vm in vms]
        for vm in sorted(orphans, key=lambda v: (v.host, v.name)):
            proposed.append(orphan(vm, self.policy))
        paced = pace(
            proposed,
            rollout=self.policy.rollout,
            zone_of={p.name: p.placement.zone for p in self.repo.proxies},
            zone_sizes=Counter(p.placement.zone for p in self.repo.proxies),
            in_flight=self.in_flight,
            down=self.down,
            halted=tuple(sorted(self.halts)),
        )
        gated = gate_deletes(
            paced, has_proxies=bool(self.repo.proxies), policy=self.policy, limits=self.limits
        )
        actions = record_protect(gated, vms=self.vms, manifests=self.manifests)
        actions.extend(
            leftover_cleanups(
                actions,
                fleet=self.fleet.name,
                pool_volumes=self.volumes,
                taken=self.taken,
                fleets=self.fleets,
                wanted_domain=self._wanted_domain,
            )
        )
        actions.extend(unused_bases(self.repo, self.volumes, self.vms, self.fleets, actions))
        if self.policy.suspend:
            actions = [block(a, SUSPENDED) if a.kind in MUTATING else a for a in actions]
        return Plan(
            actions=(*actions, *self.abandoned),
            suspect_zones=tuple(self.suspect),
            paused=tuple(
                vm.ref
                for _, vm in sorted(self.vms.items())
                if vm.state is DomainState.PAUSED and vm.observed.reason == "ioerror"
            ),
            halts=tuple(self.halts[name] for name in sorted(self.halts)),
        )

    # -- one proxy ---------------------------------------------------------------------------

    def _proxy(self, proxy: Proxy) -> list[Action]:
        vms = self.owned.get(proxy.name, [])
        made = self._made(proxy)
        if made is None:  # a loaded repo never has this; block rather than crash
            keeps: list[Action] = [vm.action(Keep, f"{UNRESOLVED}; left as it is") for vm in vms]
            return keeps or [Blocked(reason=UNRESOLVED, proxy=proxy.name, blocks=CREATE)]
        current, stale = self._split(proxy, made)
        if proxy.network is not None:
            if is_down(proxy, current, stale, history=self.history, limits=self.limits):
                self.down[proxy.placement.zone].add(proxy.name)
            if stale and not current:
                return first_half(proxy, stale, why="spec changed")
        if current:
            return self._settle(proxy, made, current, stale)
        if stale:
            return self._replace(proxy, made, stale)
        return [self._new_vm(proxy, made, prefer=None, replaces=None)]

    def _made(self, proxy: Proxy) -> Made | None:
        """The proxy's image and machine type, resolved once per plan per pair of keys."""
        keys = (proxy.placement.image, proxy.placement.machine_type)
        if keys not in self.made:
            image = resolve_image(self.fleet, keys[0])
            machine_type = self.fleet.machine_type(keys[1])
            found = None if image is None or machine_type is None else Made(image, machine_type)
            self.made[keys] = found
        return self.made[keys]

    def _split(self, proxy: Proxy, made: Made) -> tuple[list[OwnedVm], list[OwnedVm]]:
        """The proxy's VMs current on their host (not a draining one), and the stale ones."""
        found = self.split.get(proxy.name)
        if found is None:
            current: list[OwnedVm] = []
            stale: list[OwnedVm] = []
            for vm in self.owned.get(proxy.name, ()):
                same = vm.digest == self._digest(proxy, made, vm.host)
                same = same and vm.host not in self.draining
                (current if same else stale).append(vm)
            found = self.split[proxy.name] = (current, stale)
        return found

    def _digest(self, proxy: Proxy, made: Made, host: str) -> str:
        """The digest of ``proxy`` on ``host``, computed once per plan (many rules ask)."""
        key = (proxy.name, host)
        if key not in self.digests:
            self.digests[key] = self.digest_of(
                proxy, self.hosts[host], image=made.image, machine_type=made.machine_type
            )
        return self.digests[key]

    def _settle(
        self, proxy: Proxy, made: Made, current: list[OwnedVm], stale: list[OwnedVm]
    ) -> list[Action]:
        """The proxy has a VM with the current digest: keep it, delete the rest safely."""
        keeper, *duplicates = (
            current if len(current) == 1 else sorted(current, key=self._preference)
        )
        actions: list[Action] = [self._keep(proxy, made, keeper)]
        if not duplicates and not stale:
            return actions
        kept = Keeper(host=keeper.host, domain=keeper.name, health=proxy.health)
        judged = handover(keeper, proxy=proxy.name, history=self.history, limits=self.limits)
        if proxy.network is not None:  # one address: the others go now, whatever it is
            judged = Handover(True, "which holds the same fixed address")
        if judged.halt is not None:
            self.halts[proxy.name] = judged.halt
        if stale:
            self.in_flight[proxy.placement.zone] += 1
        others = [
            (vm, f"duplicate of {keeper.name} on {keeper.host}")
            for vm in sorted(duplicates, key=lambda v: (v.name, v.host))
        ]
        others += [
            (vm, f"replaced by {keeper.name} on {keeper.host}")
            for vm in sorted(stale, key=lambda v: (v.name, v.host))
        ]
        for vm, why in others:
            if judged.ready or proxy.lifecycle.protect:
                protect = proxy.lifecycle.protect
                actions.append(delete(vm, f"{why}, {judged.why}", protect=protect, keeper=kept))
            else:
                actions.append(block(vm.action(Delete, ""), f"{why}; {judged.why}"))
        return actions

    def _keep(self, proxy: Proxy, made: Made, vm: OwnedVm) -> Action:
        verdict = judge(
            vm.observed,
            host=vm.host,
            proxy=proxy,
            machine_type=made.machine_type,
            drift=self.policy.drift,
            history=self.history,
            suspect=self.suspect.get(proxy.placement.zone, ""),
        )
        if verdict is not None and verdict.cure is Cure.REPLACE and proxy.network is not None:
            return first_half(proxy, [vm], why=verdict.reason)[0]
        if verdict is not None and verdict.cure is Cure.REPLACE:
            return self._new_vm(proxy, made, prefer=vm.host, replaces=vm, heal=verdict.reason)
        return kept_vm_action(
            vm,
            verdict,
            proxy=proxy.name,
            drift=self.policy.drift,
            pool=self.hosts[vm.host].pool,
            free=self.room.pool_free(vm.host),
        )

    def _replace(self, proxy: Proxy, made: Made, stale: list[OwnedVm]) -> list[Action]:
        """No VM has the current digest: one new VM first; the old ones go once it runs."""
        old, *others = sorted(stale, key=self._preference)
        unchanged = old.digest == self._digest(proxy, made, old.host)
        drain = leaving(old.host, self.draining) if unchanged else ""
        new = self._new_vm(proxy, made, prefer=old.host, replaces=old, heal=drain)
        why = PROTECTED if proxy.lifecycle.protect else f"waiting for {proxy.name}'s replacement"
        others.sort(key=lambda v: (v.name, v.host))
        return [new, *(block(vm.action(Delete, ""), why) for vm in others)]

    def _new_vm(
        self,
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
        kind = CREATE if replaces is None else REPLACE
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
        unknown = self.placement.unreachable_for(proxy)
        if unknown is not None:
            what = "its VM" if replaces is None else "a replacement"
            return stop(f"host {unknown} is unreachable; {what} may already run there")
        digest_on = partial(self._digest, proxy, made)
        clash, generation = new_name(
            self.fleet.name,
            proxy.name,
            heal=bool(heal),
            targets=self.placement.targets(proxy),
            reachable=self.reachable,
            digest_on=digest_on,
            taken=self.taken,
        )
        if clash is not None:
            host, name, digest, holder = clash
            return stop(
                f"the domain name is held by {holder} on {host}",
                host=host,
                domain=name,
                digest=digest,
            )
        placed, why = self.placement.place(proxy, made, prefer=prefer)
        if placed is None:
            return stop(why)
        host = placed
        digest = self._digest(proxy, made, host)
        name = domain_name(self.fleet.name, proxy.name, digest, generation)
        if len(name) > MAX_DOMAIN_NAME:
            too_long = f"domain name is longer than {MAX_DOMAIN_NAME} characters"
            return stop(too_long, host=host, domain=name, digest=digest)
        note = self.room.base_note(host, made.image)
        self.load[host] += 1
        self.room.take(host, made.machine_type, made.image)
        vm = self._new(proxy, made, host)
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

    def _new(self, proxy: Proxy, made: Made, host: str) -> NewVm:
        return NewVm.of(self.fleet.name, proxy, self.hosts[host], made.image, made.machine_type)

    def _wanted_domain(self, proxy_name: str, host: str) -> str | None:
        """The domain a VM of ``proxy_name`` would get on ``host`` now (None: no manifest)."""
        proxy = self.manifests.get(proxy_name)
        made = self._made(proxy) if proxy is not None else None
        if proxy is None or made is None:
            return None
        return domain_name(self.fleet.name, proxy.name, self._digest(proxy, made, host))
