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

from reconciler.core.plan.bases import unused_bases
from reconciler.core.plan.capacity import Room
from reconciler.core.plan.creates import new_vm_action
from reconciler.core.plan.digest import Digests
from reconciler.core.plan.drain import leaving
from reconciler.core.plan.gates import PROTECTED, gate_deletes, orphan
from reconciler.core.plan.handover import Handover, handover, preference
from reconciler.core.plan.healing import Cure, Verdict, judge, suspect_zones
from reconciler.core.plan.index import PlanIndex
from reconciler.core.plan.keep import kept_vm_action
from reconciler.core.plan.leftovers import leftover_cleanups
from reconciler.core.plan.placement import Placement
from reconciler.core.plan.recreate import first_half, is_down
from reconciler.core.plan.relabel import record_protect
from reconciler.core.plan.rollout import pace
from reconciler.core.plan.vms import Made, OwnedVm, delete
from reconciler.model import ActionKind, DomainState, Inventory, Plan, Proxy, Repo
from reconciler.model.history import History
from reconciler.model.limits import Limits
from reconciler.model.plan import MUTATING, Action, Blocked, Delete, Keep, Keeper, block

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
    """One planning pass. Its state (host load, halts, zones in flight) lives only as long as
    ``plan`` runs; what it looks up is in ``index``, built once."""

    def __init__(
        self, repo: Repo, inventory: Inventory, history: History, limits: Limits, memo: Digests
    ) -> None:
        self.repo = repo
        self.history = history
        self.limits = limits
        self.halts = {h.proxy: h for h in history.halts}  # and those this plan finds
        self.fleet = repo.fleet
        self.policy = repo.fleet.policy
        self.index = index = PlanIndex(repo, inventory, memo=memo)
        self.hosts, self.manifests = index.hosts, index.manifests
        # proxy -> (zone, its old VMs): a replace's second step, the old VMs still there
        self.finishing: dict[str, tuple[str, frozenset[tuple[str, str]]]] = {}
        self.down: dict[str, set[str]] = defaultdict(set)  # zone -> fixed proxies not serving
        self.room = Room(inventory, self.policy.overcommit)
        seen = index.observed
        self.owned, self.vms, self.taken = seen.owned, seen.vms, seen.taken
        self.volumes, self.fleets = seen.volumes, seen.fleets
        self.placement = Placement(  # seen.load: the creates planned are counted in
            self.hosts, index.zones, reachable=index.reachable, load=seen.load, room=self.room
        )
        self.suspect = suspect_zones(self._kept_running, history)
        self._new_vm = partial(new_vm_action, index, self.placement)

    def _preference(self, vm: OwnedVm) -> tuple[bool, bool, bool, str, str]:
        return preference(vm, self.history)

    def _kept_running(self) -> dict[str, list[tuple[str, str] | None]]:
        """Zone -> each proxy's kept VM as (host, domain) when it runs, else None."""
        zones: dict[str, list[tuple[str, str] | None]] = defaultdict(list)
        for proxy in self.repo.proxies:
            made = self.index.made(proxy)
            current = self.index.split(proxy, made)[0] if made is not None else []
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
        gate = partial(
            gate_deletes,
            has_proxies=bool(self.repo.proxies),
            policy=self.policy,
            limits=self.limits,
        )
        paced = pace(
            proposed,
            rollout=self.policy.rollout,
            zone_of={p.name: p.placement.zone for p in self.repo.proxies},
            zone_sizes=Counter(p.placement.zone for p in self.repo.proxies),
            in_flight=self._in_flight(gate(proposed)),
            down=self.down,
            halted=tuple(sorted(self.halts)),
        )
        actions = record_protect(gate(paced), vms=self.vms, manifests=self.manifests)
        actions.extend(
            leftover_cleanups(
                actions,
                fleet=self.fleet.name,
                pool_volumes=self.volumes,
                taken=self.taken,
                fleets=self.fleets,
                wanted_domain=self.index.wanted_domain,
            )
        )
        actions.extend(unused_bases(self.repo, self.volumes, self.vms, self.fleets, actions))
        if self.policy.suspend:
            actions = [block(a, SUSPENDED) if a.kind in MUTATING else a for a in actions]
        return Plan(
            actions=(*actions, *self.index.observed.abandoned),
            suspect_zones=tuple(self.suspect),
            paused=tuple(
                vm.ref
                for _, vm in sorted(self.vms.items())
                if vm.state is DomainState.PAUSED and vm.observed.reason == "ioerror"
            ),
            halts=tuple(self.halts[name] for name in sorted(self.halts)),
        )

    def _in_flight(self, allowed: list[Action]) -> Counter[str]:
        """Zone -> its proxies still finishing a replace after this plan: an old VM of theirs
        stays (its delete waits for the new VM's health, is protected, or is over the delete
        budget; ``allowed`` is the plan with the budget applied). A proxy whose old VMs all
        go in this plan frees its batch place now: the zone's next replace starts in the
        same run as that delete, not a run later (pace only blocks replaces and recreates,
        so a delete the budget lets go here is let go after pace too)."""
        going = {(a.host, a.domain) for a in allowed if isinstance(a, Delete)}
        return Counter(zone for zone, olds in self.finishing.values() if not olds <= going)

    # -- one proxy ---------------------------------------------------------------------------

    def _proxy(self, proxy: Proxy) -> list[Action]:
        vms = self.owned.get(proxy.name, [])
        made = self.index.made(proxy)
        if made is None:  # a loaded repo never has this; block rather than crash
            keeps: list[Action] = [vm.action(Keep, f"{UNRESOLVED}; left as it is") for vm in vms]
            return keeps or [Blocked(reason=UNRESOLVED, proxy=proxy.name, blocks=CREATE)]
        current, stale = self.index.split(proxy, made)
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
            olds = frozenset((vm.host, vm.name) for vm in stale)
            self.finishing[proxy.name] = (proxy.placement.zone, olds)
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
                if vm in stale:
                    actions.extend(self._revive(proxy, made, vm))
        return actions

    def _keep(self, proxy: Proxy, made: Made, vm: OwnedVm) -> Action:
        verdict = self._judge(proxy, made, vm, suspect=self.suspect.get(proxy.placement.zone, ""))
        if verdict is not None and verdict.cure is Cure.REPLACE and proxy.network is not None:
            return first_half(proxy, [vm], why=verdict.reason)[0]
        if verdict is not None and verdict.cure is Cure.REPLACE:
            return self._new_vm(proxy, made, prefer=vm.host, replaces=vm, heal=verdict.reason)
        return self._kept(proxy, vm, verdict)

    def _judge(self, proxy: Proxy, made: Made, vm: OwnedVm, *, suspect: str) -> Verdict | None:
        """The day-2 verdict on ``vm`` (reconciler.core.plan.healing.judge)."""
        return judge(
            vm.observed,
            host=vm.host,
            proxy=proxy,
            machine_type=made.machine_type,
            drift=self.policy.drift,
            history=self.history,
            suspect=suspect,
        )

    def _kept(self, proxy: Proxy, vm: OwnedVm, verdict: Verdict | None) -> Action:
        """What becomes of ``vm`` when healing does not replace it (kept_vm_action)."""
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
        unchanged = old.digest == self.index.digest(proxy, made, old.host)
        drain = leaving(old.host, self.index.draining) if unchanged else ""
        new = self._new_vm(proxy, made, prefer=old.host, replaces=old, heal=drain)
        why = PROTECTED if proxy.lifecycle.protect else f"waiting for {proxy.name}'s replacement"
        others.sort(key=lambda v: (v.name, v.host))
        # A start of the old VM goes first: it is what serves the proxy in this run's status.
        return [
            *self._revive(proxy, made, old),
            new,
            *(block(vm.action(Delete, ""), why) for vm in others),
        ]

    def _revive(self, proxy: Proxy, made: Made, vm: OwnedVm) -> list[Action]:
        """A Start of ``vm``, an old VM of ``proxy`` that went down while it waits to be
        replaced (for its rollout batch, under a halt, for its successor's health check): it
        serves the proxy until then, so the day-2 rules start it as they would a kept VM.
        Nothing when it runs, or when those rules would not start it (drift: detect, its
        restarts used up: the replace is planned anyway)."""
        if vm.state is DomainState.RUNNING:
            return []
        verdict = self._judge(proxy, made, vm, suspect="")
        if verdict is not None and verdict.cure is not Cure.START:
            return []
        action = self._kept(proxy, vm, verdict)
        return [action] if action.kind is ActionKind.START else []
