"""The planner: desired state + inventory -> Plan. Pure: no I/O, no clock, no randomness.

``plan(repo, inventory)`` decides, for every proxy and every owned VM, one
action: create, keep, start, replace, delete, blocked (a safety rule stopped a
mutating action; ``blocks`` says which) or abandon. A VM that stays and whose
recorded protect flag differs from its manifest's also gets a relabel, right
after its own action, so that protect still holds once the manifest is gone.
Volumes named exactly as this fleet's VMs (``<domain>.qcow2``,
``<domain>-seed.iso``) that no domain on their host uses and that no proxy of
the repo would use there get a cleanup: a create killed before its define
leaves them behind. Base images that no image of fleet.yaml and no VM of this
fleet on their host needs get a cleanup too (``domain`` None; reconciler.core.plan.bases).
The day-2 rules (``core.healing``: crashed VMs, hand edits, failing probes)
need what earlier runs saw and the time: ``history``. Every replace, whatever
caused it, is paced into batches per zone or held while a rollout is halted
(``core.rollout``).
The policy is ``repo.fleet.policy``. docs/planning.md is the operator's
description of every rule and reason text; the tests in tests/plan_cases/ hold
one case per rule.

The order of the plan is part of its contract (the CLI prints it, tests pin
it): proxies by name, each with its actions (the kept VM or the replace first,
then duplicates, then older VMs, each group by domain name and host); then VMs
whose manifest is gone, by host and domain; then abandoned VMs, by host and
domain; then cleanups, by host and domain; then base cleanups, by host and
base. A relabel directly follows the action of the VM it concerns.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TypeVar

from reconciler.core.naming import (
    MAX_DOMAIN_NAME,
    domain_name,
    resolve_image,
    volume_domain,
)
from reconciler.core.plan.bases import unused_bases
from reconciler.core.plan.capacity import GIB, Room
from reconciler.core.plan.digest import proxy_digest
from reconciler.core.plan.healing import Cure, judge, suspect_zones
from reconciler.core.plan.rollout import pace
from reconciler.model import (
    ActionKind,
    Domain,
    DomainRef,
    DomainState,
    DriftMode,
    Host,
    Image,
    Inventory,
    MachineType,
    Owner,
    Plan,
    Proxy,
    Repo,
)
from reconciler.model.history import History
from reconciler.model.plan import (
    MUTATING,
    Abandon,
    Action,
    Blocked,
    Cleanup,
    Create,
    Delete,
    Keep,
    Keeper,
    NewVm,
    Relabel,
    Replace,
    Start,
    replaced,
)
from reconciler.model.vm import vm_volumes

CREATE, START = ActionKind.CREATE, ActionKind.START
REPLACE, DELETE = ActionKind.REPLACE, ActionKind.DELETE

UP_TO_DATE = "up to date"
SUSPENDED = "the fleet is suspended (policy.suspend)"
PROTECTED = "protected (lifecycle.protect)"
PRUNE_OFF = "its manifest is gone but prune is off"
EMPTY = "the desired set is empty and allowEmpty is false"
UNRESOLVED = "its image or machine type does not resolve in fleet.yaml"
RESUME_ROOM = GIB
"""Free pool space at which a VM paused on an I/O error is resumed."""

A = TypeVar("A", Keep, Start, Delete, Abandon)


@dataclass(frozen=True, slots=True)
class _Made:
    """What a proxy's VMs are made of: its image and machine type, resolved once."""

    image: Image
    machine_type: MachineType


def plan(repo: Repo, inventory: Inventory, history: History | None = None) -> Plan:
    """Diff ``repo`` against ``inventory`` under ``repo.fleet.policy``, with what earlier
    runs saw (``history``; none: the day-2 rules that need the past do not fire)."""
    return _Planner(repo, inventory, history or History()).run()


@dataclass(frozen=True, slots=True)
class _Vm:
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


def _block(action: Action, reason: str) -> Blocked:
    """The same action, stopped by a safety rule."""
    if isinstance(action, Blocked):
        return Blocked(
            reason=reason,
            proxy=action.proxy,
            host=action.host,
            domain=action.domain,
            digest=action.digest,
            blocks=action.blocks,
            replaces=action.replaces,
            owner=action.owner,
            volumes=action.volumes,
        )
    return Blocked(
        reason=reason,
        proxy=action.proxy,
        host=action.host,
        domain=action.domain,
        digest=action.digest,
        blocks=action.kind,
        replaces=replaced(action),
        owner=action.owner if isinstance(action, Relabel) else None,
        volumes=action.volumes if isinstance(action, Cleanup) else (),
    )


class _Planner:
    """One planning pass. Its state (host load) lives only as long as ``plan`` runs."""

    def __init__(self, repo: Repo, inventory: Inventory, history: History) -> None:
        self.repo = repo
        self.history = history
        self.fleet = repo.fleet
        self.policy = repo.fleet.policy
        self.hosts: dict[str, Host] = {h.name: h for h in self.fleet.hosts}
        self.zones: dict[str, list[str]] = defaultdict(list)
        for host in sorted(self.hosts.values(), key=lambda h: h.name):
            self.zones[host.zone].append(host.name)
        self.reachable = frozenset(
            h.name for h in inventory.hosts if h.reachable and h.name in self.hosts
        )
        self.manifests: dict[str, Proxy] = {p.name: p for p in repo.proxies}
        self.owned: dict[str, list[_Vm]] = defaultdict(list)
        self.vms: dict[tuple[str, str], _Vm] = {}  # (host, domain) -> owned VM in fleet.yaml
        self.taken: dict[str, dict[str, bool]] = defaultdict(dict)  # host -> name -> foreign?
        self.load: Counter[str] = Counter()  # owned VMs + creates planned so far, per host
        self.abandoned: list[Action] = []
        self.volumes: dict[str, tuple[str, ...]] = {}  # reachable host in fleet.yaml -> volumes
        self.fleets: dict[str, set[str]] = defaultdict(set)  # host -> other fleets' ids seen
        self.in_flight: Counter[str] = Counter()  # zone -> proxies finishing a replace
        self.digests: dict[tuple[str, str], str] = {}  # (proxy, host) -> digest, per plan
        self.room = Room(inventory, self.policy.overcommit)
        self._observe(inventory)
        self.suspect = suspect_zones(self._kept_running(), history)

    def _observe(self, inventory: Inventory) -> None:
        for host in sorted(inventory.hosts, key=lambda h: h.name):
            if not host.reachable:
                continue  # its VMs are unknown, never absent
            for domain in sorted(host.domains, key=lambda d: d.name):
                owner = domain.owner
                vm = None
                if owner is not None and owner.fleet == self.fleet.name:
                    vm = _Vm(owner.proxy, host.name, domain.name, domain.state, owner, domain)
                if host.name not in self.hosts:
                    if vm is not None:
                        reason = f"host {host.name} is no longer in fleet.yaml; left alone"
                        self.abandoned.append(vm.action(Abandon, reason))
                    continue
                self.taken[host.name][domain.name] = vm is None
                if owner is not None and owner.fleet != self.fleet.name:
                    self.fleets[host.name].add(owner.fleet)
                if vm is not None:
                    self.owned[vm.proxy].append(vm)
                    self.vms[(host.name, domain.name)] = vm
                    self.load[host.name] += 1
            if host.name in self.hosts:
                self.volumes[host.name] = host.volumes

    def _preference(self, vm: _Vm) -> tuple[bool, bool, str, str]:
        """Which of several VMs of one proxy is kept: a running one first, then one whose
        probe is not failing, then by name, host."""
        failing = self.history.record(vm.host, vm.name).failing_since is not None
        return (vm.state is not DomainState.RUNNING, failing, vm.name, vm.host)

    def _kept_running(self) -> dict[str, list[tuple[str, str] | None]]:
        """Zone -> each proxy's kept VM as (host, domain) when it runs, else None."""
        zones: dict[str, list[tuple[str, str] | None]] = defaultdict(list)
        for proxy in self.repo.proxies:
            made = self._made(proxy)
            vms = [
                vm
                for vm in self.owned.get(proxy.name, [])
                if made is not None and vm.digest == self._digest(proxy, made, vm.host)
            ]
            running = [vm for vm in vms if vm.state is DomainState.RUNNING]
            kept = min(running, key=self._preference) if running else None
            zones[proxy.placement.zone].append((kept.host, kept.name) if kept else None)
        return zones

    def run(self) -> Plan:
        proposed: list[Action] = []
        for proxy in sorted(self.repo.proxies, key=lambda p: p.name):
            proposed.extend(self._proxy(proxy))
        desired = {p.name for p in self.repo.proxies}
        orphans = [vm for name, vms in self.owned.items() if name not in desired for vm in vms]
        for vm in sorted(orphans, key=lambda v: (v.host, v.name)):
            proposed.append(self._orphan(vm))
        halt = self.history.halt
        paced = pace(
            proposed,
            rollout=self.policy.rollout,
            zone_of={p.name: p.placement.zone for p in self.repo.proxies},
            zone_sizes=Counter(p.placement.zone for p in self.repo.proxies),
            in_flight=self.in_flight,
            halted=f"{halt.proxy}'s new VM {halt.domain}: {halt.reason}" if halt else "",
        )
        actions = self._record_protect(self._gate_deletes(paced))
        actions.extend(self._cleanups(actions))
        actions.extend(unused_bases(self.repo, self.volumes, self.vms, self.fleets, actions))
        if self.policy.suspend:
            actions = [_block(a, SUSPENDED) if a.kind in MUTATING else a for a in actions]
        return Plan(
            actions=(*actions, *self.abandoned),
            suspect_zones=tuple(self.suspect),
            paused=tuple(
                vm.ref
                for _, vm in sorted(self.vms.items())
                if vm.state is DomainState.PAUSED and vm.observed.reason == "ioerror"
            ),
        )

    # -- one proxy ---------------------------------------------------------------------------

    def _proxy(self, proxy: Proxy) -> list[Action]:
        vms = self.owned.get(proxy.name, [])
        made = self._made(proxy)
        if made is None:  # a loaded repo never has this; block rather than crash
            keeps: list[Action] = [vm.action(Keep, f"{UNRESOLVED}; left as it is") for vm in vms]
            return keeps or [Blocked(reason=UNRESOLVED, proxy=proxy.name, blocks=CREATE)]
        digests = {h: self._digest(proxy, made, h) for h in {vm.host for vm in vms}}
        current = [vm for vm in vms if vm.digest == digests[vm.host]]
        stale = [vm for vm in vms if vm.digest != digests[vm.host]]
        if current:
            return self._settle(proxy, made, current, stale)
        if stale:
            return self._replace(proxy, made, stale)
        return [self._create(proxy, made)]

    def _made(self, proxy: Proxy) -> _Made | None:
        image = resolve_image(self.fleet, proxy.placement.image)
        machine_type = self.fleet.machine_type(proxy.placement.machine_type)
        if image is None or machine_type is None:
            return None
        return _Made(image, machine_type)

    def _digest(self, proxy: Proxy, made: _Made, host: str) -> str:
        """The digest of ``proxy`` on ``host``, computed once per plan: the probe-path guard,
        the proxy's own rules, name clashes and cleanups all ask for it."""
        key = (proxy.name, host)
        if key not in self.digests:
            self.digests[key] = proxy_digest(
                proxy, self.hosts[host], image=made.image, machine_type=made.machine_type
            )
        return self.digests[key]

    def _settle(
        self, proxy: Proxy, made: _Made, current: list[_Vm], stale: list[_Vm]
    ) -> list[Action]:
        """The proxy has a VM with the current digest: keep it, delete the rest safely."""
        keeper, *duplicates = sorted(current, key=self._preference)
        kept = Keeper(host=keeper.host, domain=keeper.name, health=proxy.health)
        actions: list[Action] = [self._keep(proxy, made, keeper)]
        halt = self.history.halt
        record = self.history.record(keeper.host, keeper.name)
        # The halted new VM counts as failing only until a check passes (it may just have
        # needed longer than the replace timeout); then its old VM may go.
        failing = record.failing_since is not None or (
            halt is not None
            and (halt.proxy, halt.domain) == (proxy.name, keeper.name)
            and not record.healthy_once
        )
        if stale:
            self.in_flight[proxy.placement.zone] += 1
        for vm in sorted(duplicates, key=lambda v: (v.name, v.host)):
            why = f"duplicate of {keeper.name} on {keeper.host}"
            actions.append(self._second_step(proxy, vm, why, keeper=kept, failing=failing))
        for vm in sorted(stale, key=lambda v: (v.name, v.host)):
            if keeper.state is DomainState.RUNNING and failing and not proxy.lifecycle.protect:
                why = f"waiting for {keeper.name} on {keeper.host} to pass its health check"
                actions.append(_block(vm.action(Delete, ""), why))
            elif keeper.state is DomainState.RUNNING or proxy.lifecycle.protect:
                why = f"replaced by {keeper.name} on {keeper.host}, which is running"
                actions.append(self._delete(proxy, vm, why, keeper=kept))
            else:
                why = f"waiting for the replacement {keeper.name} on {keeper.host} to run"
                actions.append(_block(vm.action(Delete, ""), why))
        return actions

    def _second_step(
        self, proxy: Proxy, vm: _Vm, why: str, *, keeper: Keeper, failing: bool
    ) -> Action:
        """The delete of a VM the proxy no longer needs; held while the kept VM's probe
        fails, instead of the executor waiting for a health check that last failed."""
        if failing and not proxy.lifecycle.protect:
            held = f"{why}; waiting for {keeper.domain} to pass its health check"
            return _block(vm.action(Delete, ""), held)
        return self._delete(proxy, vm, why, keeper=keeper)

    def _keep(self, proxy: Proxy, made: _Made, vm: _Vm) -> Action:
        verdict = judge(
            vm.observed,
            host=vm.host,
            proxy=proxy,
            machine_type=made.machine_type,
            drift=self.policy.drift,
            history=self.history,
            suspect=self.suspect.get(proxy.placement.zone, ""),
        )
        if verdict is not None:
            if verdict.cure is Cure.START:
                return vm.action(Start, verdict.reason)
            if verdict.cure is Cure.REPLACE:
                return self._new_vm(proxy, made, prefer=vm.host, replaces=vm, heal=verdict.reason)
            if verdict.cure is Cure.HOLD:
                return _block(
                    Blocked(reason="", proxy=proxy.name, blocks=REPLACE, replaces=vm.ref),
                    verdict.reason,
                )
            return vm.action(Keep, verdict.reason)
        state = vm.state
        if state is DomainState.RUNNING:
            return vm.action(Keep, UP_TO_DATE)
        if state is DomainState.SHUTOFF:
            if self.policy.drift is DriftMode.CORRECT:
                return vm.action(Start, "shut off; drift: correct starts it")
            return vm.action(Keep, "shut off; drift: detect only reports it")
        if state is DomainState.PAUSED and vm.observed.reason == "ioerror":
            return self._paused_by_io_error(vm)
        if state is DomainState.PAUSED:
            return vm.action(Keep, "paused; left as it is (resume it by hand)")
        if state is DomainState.CRASHED:
            return vm.action(Keep, "crashed; left for inspection")
        return vm.action(Keep, f"in state {state.value}; left as it is")

    def _paused_by_io_error(self, vm: _Vm) -> Action:
        """A VM the hypervisor paused on an I/O error (a full pool, most often): resumed under
        drift: correct once its pool has ``RESUME_ROOM`` free again, else reported."""
        pool = self.hosts[vm.host].pool
        what = "paused by the hypervisor (I/O error)"
        free = self.room.pool_free(vm.host)
        if free is None:
            room, has_room = f"free space of pool {pool} unknown", False
        else:
            room, has_room = f"pool {pool} has {free / GIB:.1f} GiB free", free >= RESUME_ROOM
        if self.policy.drift is not DriftMode.CORRECT:
            return vm.action(Keep, f"{what}; {room}; drift: detect only reports it")
        if not has_room:
            return vm.action(Keep, f"{what}; {room}; resumed once it has {RESUME_ROOM // GIB} GiB")
        return vm.action(Start, f"{what}; {room}; drift: correct resumes it")

    def _delete(
        self, proxy: Proxy, vm: _Vm, reason: str, *, keeper: Keeper | None = None
    ) -> Action:
        action = Delete(
            reason=reason,
            proxy=vm.proxy,
            host=vm.host,
            domain=vm.name,
            digest=vm.digest,
            keeper=keeper,
        )
        return _block(action, PROTECTED) if proxy.lifecycle.protect else action

    def _replace(self, proxy: Proxy, made: _Made, stale: list[_Vm]) -> list[Action]:
        """No VM has the current digest: one new VM first; the old ones go once it runs."""
        old, *others = sorted(stale, key=self._preference)
        new = self._new_vm(proxy, made, prefer=old.host, replaces=old)
        why = PROTECTED if proxy.lifecycle.protect else f"waiting for {proxy.name}'s replacement"
        others.sort(key=lambda v: (v.name, v.host))
        return [new, *(_block(vm.action(Delete, ""), why) for vm in others)]

    def _create(self, proxy: Proxy, made: _Made) -> Action:
        return self._new_vm(proxy, made, prefer=None, replaces=None)

    def _new_vm(
        self,
        proxy: Proxy,
        made: _Made,
        *,
        prefer: str | None,
        replaces: _Vm | None,
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
        unknown = self._unreachable_for(proxy)
        if unknown is not None:
            what = "its VM" if replaces is None else "a replacement"
            return stop(f"host {unknown} is unreachable; {what} may already run there")
        generation = self._free_generation(proxy, made) if heal else 0
        clash = self._name_clash(proxy, made, generation)
        if clash is not None:
            host, name, digest, holder = clash
            return stop(
                f"the domain name is held by {holder} on {host}",
                host=host,
                domain=name,
                digest=digest,
            )
        placed, why = self._place(proxy, made, prefer=prefer)
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
        if replaces is None:
            return Create(
                reason=reason, proxy=proxy.name, host=host, domain=name, digest=digest, vm=vm
            )
        why_new = heal or f"spec changed ({replaces.digest[:8]} -> {digest[:8]})"
        reason = (
            f"{why_new}: {reason}; "
            f"{replaces.name} on {replaces.host} is deleted once the new VM runs"
        )
        return Replace(
            reason=reason,
            proxy=proxy.name,
            host=host,
            domain=name,
            digest=digest,
            vm=vm,
            replaces=replaces.ref,
            heal=bool(heal),
        )

    def _new(self, proxy: Proxy, made: _Made, host: str) -> NewVm:
        return NewVm(
            fleet=self.fleet.name,
            proxy=proxy.name,
            host=self.hosts[host],
            image=made.image,
            machine_type=made.machine_type,
            cloud_init=proxy.cloud_init,
            install_guest_agent=proxy.install_guest_agent,
            protect=proxy.lifecycle.protect,
            health=proxy.health,
        )

    def _unreachable_for(self, proxy: Proxy) -> str | None:
        """The first unreachable host where a VM of ``proxy`` could be: its zone's, or its pin."""
        where = set(self.zones.get(proxy.placement.zone, ()))
        if proxy.placement.host in self.hosts:
            where.add(proxy.placement.host)
        return next((h for h in sorted(where) if h not in self.reachable), None)

    def _free_generation(self, proxy: Proxy, made: _Made) -> int:
        """The first generation >= 1 whose name is free on every host ``proxy`` may go to."""
        generation = 1
        while any(
            domain_name(self.fleet.name, proxy.name, self._digest(proxy, made, h), generation)
            in self.taken[h]
            for h in self._targets(proxy)
        ):
            generation += 1
        return generation

    def _name_clash(
        self, proxy: Proxy, made: _Made, generation: int = 0
    ) -> tuple[str, str, str, str] | None:
        """(host, name, digest, holder) when the name the new VM would get on any host it
        may go to is taken there; None when it is free everywhere.

        Checked over every candidate host, not just the one placement picks, so
        that the block does not come and go with the load of the zone: a
        foreign domain under our name may be our VM without its metadata.
        """
        for host in self._targets(proxy):
            if host not in self.reachable:
                continue
            digest = self._digest(proxy, made, host)
            name = domain_name(self.fleet.name, proxy.name, digest, generation)
            if name not in self.taken[host]:
                continue
            holder = "a foreign domain" if self.taken[host][name] else "another VM of this fleet"
            return host, name, digest, holder
        return None

    def _targets(self, proxy: Proxy) -> list[str]:
        """The hosts of fleet.yaml a new VM of ``proxy`` may go to: its pin, or its zone."""
        pin = proxy.placement.host
        if pin is not None:
            return [pin] if pin in self.hosts else []
        return self.zones.get(proxy.placement.zone, [])

    def _place(self, proxy: Proxy, made: _Made, *, prefer: str | None) -> tuple[str | None, str]:
        """The host a new VM goes to (and why), or None and the reason there is none."""
        zone, pin = proxy.placement.zone, proxy.placement.host
        candidates = self._targets(proxy)
        if not candidates:
            if pin is not None:
                return None, f"pinned host {pin} is not in fleet.yaml"
            return None, f"zone {zone} has no hosts in fleet.yaml"
        counted = [h for h in candidates if h in self.reachable and self._has_room(h)]
        short = {
            h: self.room.shortfall(self.hosts[h], made.machine_type, made.image) for h in counted
        }
        free = [h for h in counted if not short[h]]
        if prefer in free:
            return prefer, f"on {prefer}, beside the VM it replaces"
        if not free and short:
            where = f"pinned host {pin}" if pin is not None else f"zone {zone}"
            return None, f"{where} has no host with room: " + "; ".join(short.values())
        if not free:
            if pin is not None:
                return None, f"pinned host {pin} is full (maxProxies {self._max(pin)})"
            return None, f"zone {zone} has no host with free capacity (maxProxies)"
        best = min(free, key=lambda h: (self.load[h], h))
        if pin is not None:
            return best, f"on pinned host {best}"
        return best, f"on {best}, the least loaded host of zone {zone} ({self.load[best]} VMs)"

    def _max(self, host: str) -> int | None:
        return self.hosts[host].max_proxies

    def _has_room(self, host: str) -> bool:
        limit = self._max(host)
        return limit is None or self.load[host] < limit

    # -- protect, recorded in the VMs that stay -------------------------------------------

    def _record_protect(self, actions: list[Action]) -> list[Action]:
        """Each action that leaves a VM of a proxy with a manifest in place, followed by a
        RELABEL when the VM's recorded protect differs from the manifest's.

        Run after the delete gates, so that a VM whose delete a gate held back
        is relabelled too; before suspend, which blocks relabels like any
        mutating action. A VM this plan deletes, or replaces, is left as it is.
        """
        result: list[Action] = []
        for action in actions:
            result.append(action)
            vm = self._staying(action)
            manifest = self.manifests.get(vm.proxy) if vm is not None else None
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

    def _staying(self, action: Action) -> _Vm | None:
        """The owned VM that ``action`` leaves in place, if it speaks about one."""
        stopped = action.blocks if isinstance(action, Blocked) else None
        if isinstance(action, Keep | Start) or stopped in (START, DELETE):
            return self.vms.get((action.host or "", action.domain or ""))
        old = replaced(action)
        if stopped is REPLACE and old is not None:
            return self.vms.get((old.host, old.domain))
        return None

    # -- volumes of VMs that never were (an interrupted create) ---------------------------

    def _cleanups(self, actions: list[Action]) -> list[Action]:
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
        for host in sorted(self.volumes):
            leftovers: dict[str, list[str]] = defaultdict(list)
            for volume in sorted(set(self.volumes[host])):
                found = volume_domain(self.fleet.name, volume)
                if found is None:
                    continue
                domain, proxy = found
                if domain in self.taken[host] or (host, domain) in named:
                    continue
                if any(domain.startswith(f"pf-{other}-") for other in self.fleets[host]):
                    continue
                if self._wanted_domain(proxy, host) == domain:
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

    def _wanted_domain(self, proxy_name: str, host: str) -> str | None:
        """The domain a VM of ``proxy_name`` would get on ``host`` now (None: no manifest)."""
        proxy = self.manifests.get(proxy_name)
        made = self._made(proxy) if proxy is not None else None
        if proxy is None or made is None:
            return None
        return domain_name(self.fleet.name, proxy.name, self._digest(proxy, made, host))

    # -- VMs without a manifest, and the delete gates ------------------------------------

    def _orphan(self, vm: _Vm) -> Action:
        action = vm.action(Delete, f"no manifest for proxy {vm.proxy}")
        if vm.protect:
            return _block(action, PROTECTED)
        if not self.policy.prune:
            return _block(action, PRUNE_OFF)
        return action

    def _gate_deletes(self, proposed: Iterable[Action]) -> list[Action]:
        """An empty desired set, then maxDeletesPerRun: which deletes may go, by host and domain.

        A replace counts as a delete: the executor deletes the old VM in the
        same run once the new one is healthy. Creates and starts never count.
        """
        actions = list(proposed)
        if not self.repo.proxies and not self.policy.allow_empty:
            return [_block(a, EMPTY) if isinstance(a, Delete) else a for a in actions]
        victims = sorted(v for a in actions if (v := _victim(a)) is not None)
        allowed = set(victims[: max(self.policy.max_deletes_per_run, 0)])
        limit = f"beyond maxDeletesPerRun ({self.policy.max_deletes_per_run})"
        return [
            _block(a, limit) if (v := _victim(a)) is not None and v not in allowed else a
            for a in actions
        ]


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _victim(action: Action) -> tuple[str, str] | None:
    """The (host, domain) an action deletes, now or (replace) once its new VM is healthy."""
    if isinstance(action, Delete) and action.host and action.domain:
        return (action.host, action.domain)
    if isinstance(action, Replace):
        return (action.replaces.host, action.replaces.domain)
    return None
