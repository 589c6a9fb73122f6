"""Properties of the planner over generated worlds (hypothesis).

A world is a small fleet (hosts in two zones and two networks, some full,
some unreachable or missing from the inventory, sometimes a host removed from
fleet.yaml), a few proxies (pinned or not, protected or not) and owned VMs
with current, stale or misplaced digests beside foreign domains, and pools
holding VMs' leftovers and bases: current, of an older sha256, or named before
content names.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from planworld import NOW, apply_plan, build_inventory, build_repo, desired_digest

from reconciler.core.naming import volume_domain
from reconciler.core.plan.planner import plan
from reconciler.model import (
    Action,
    ActionKind,
    Domain,
    DomainRef,
    DomainState,
    HostInventory,
    Inventory,
    Owner,
    Plan,
    Repo,
)
from reconciler.model.history import Halt, History, VmRecord
from reconciler.model.limits import Limits
from reconciler.model.plan import (
    MUTATING,
    Cleanup,
    Create,
    Delete,
    Relabel,
    RemoveBase,
    Replace,
    blocked_kind,
    replaced,
)
from reconciler.model.vm import (
    MARKER_SUFFIX,
    base_marker_name,
    base_volume_name,
    is_base_volume,
    legacy_base_names,
)

HOSTS = ("kvm01", "kvm02", "kvm03", "kvm04")
PROXIES = ("web-0", "web-1", "web-2", "web-3", "web-4")
EXAMPLES = settings(max_examples=200, deadline=None)
OLD_SHA = "cd" * 32
OLD_BASE = "base-debian-cdcdcdcdcdcd.qcow2"


@st.composite
def worlds(draw: Callable[..., Any], *, capacity: bool = True) -> tuple[Repo, Inventory]:
    hosts = []
    for name in HOSTS[: draw(st.integers(1, len(HOSTS)))]:
        max_proxies = draw(st.none() | st.integers(0, 3)) if capacity else None
        network = draw(st.sampled_from(["br0", "br1"]))
        zone = draw(st.sampled_from(["a", "b"]))
        hosts.append({"name": name, "zone": zone, "maxProxies": max_proxies, "network": network})
    policy = {
        "prune": draw(st.booleans()),
        "maxDeletesPerRun": draw(st.sampled_from([0, 1, 1, 2, 3])),
        "allowEmpty": draw(st.booleans()),
        "drift": draw(st.sampled_from(["correct", "detect"])),
        "suspend": draw(st.integers(0, 4)) == 0,
    }
    proxies = []
    zones = sorted({h["zone"] for h in hosts})
    for name in draw(st.lists(st.sampled_from(PROXIES), unique=True, max_size=5)):
        pin = draw(st.none() | st.none() | st.sampled_from([h["name"] for h in hosts]))
        proxies.append(
            {
                "name": name,
                "zone": draw(st.sampled_from([*zones, *zones, *zones, "c"])),
                "host": pin,
                "userData": draw(st.sampled_from(["#cloud-config\n", "#!/bin/sh\n"])),
                "protect": draw(st.integers(0, 4)) == 0,
            }
        )
    repo = build_repo({"hosts": hosts, "policy": policy}, proxies)
    inventory: dict[str, Any] = {}
    for name in [*(h["name"] for h in hosts), "kvm09"]:
        weights = ["reachable"] * (5 if name != "kvm09" else 1)
        status = draw(st.sampled_from([*weights, "unreachable", "missing"]))
        if status == "missing":
            continue
        if status == "unreachable":
            inventory[name] = "unreachable"
            continue
        domains = draw(st.lists(_domains(repo, name), max_size=6))
        inventory[name] = domains
    built = build_inventory(repo, inventory)
    return repo, dataclasses.replace(built, hosts=tuple(_unique_names(h) for h in built.hosts))


def _unique_names(host: HostInventory) -> HostInventory:
    """A host cannot hold two domains of one name: keep the first generated."""
    by_name: dict[str, Domain] = {}
    for domain in host.domains:
        by_name.setdefault(domain.name, domain)
    return dataclasses.replace(host, domains=tuple(by_name.values()))


def _domains(repo: Repo, host: str) -> st.SearchStrategy[dict[str, Any]]:
    known = [p.name for p in repo.proxies]
    in_fleet = repo.fleet.host(host) is not None
    labels = ["current"] * 3 + ["old", "older"] + [f"as-on:{h.name}" for h in repo.fleet.hosts]
    states = ["running"] * 4 + [s.value for s in DomainState]
    owned = st.fixed_dictionaries(
        {
            "proxy": st.sampled_from([*known, *known, *known, "gone-1", "gone-2"]),
            "state": st.sampled_from(states),
            "digest": st.sampled_from(labels),
            "protect": st.booleans(),
            "base": st.sampled_from(["current", "current", "legacy", OLD_BASE]),
        }
    ).map(lambda d: _fix_digest(d, known, in_fleet))
    owned = owned.map(lambda d: {k: v for k, v in d.items() if (k, v) != ("base", "current")})
    foreign: st.SearchStrategy[dict[str, Any]] = st.just({"name": "windows11"})
    if known and in_fleet:  # a foreign domain holding the name a new VM would get
        foreign = foreign | st.sampled_from(known).map(lambda p: {"like": p})
    other_fleet = st.fixed_dictionaries(
        {"proxy": st.sampled_from(PROXIES), "fleet": st.just("office"), "digest": st.just("old")}
    )
    volumes = st.fixed_dictionaries(  # what a create killed before its define left
        {
            "proxy": st.sampled_from([*known, "gone-1", "gone-2"]),
            "digest": st.sampled_from(["current", "old", "older"]),
            "only": st.sampled_from(["overlay", "seed", "both"]),
        }
    ).map(lambda d: _fix_digest(d, known, in_fleet))
    volume_entries = volumes.map(
        lambda d: {"volumesOf": d["proxy"], "digest": d["digest"], "only": d["only"]}
    ) | st.sampled_from(
        [
            {"baseOf": "debian"},
            {"baseOf": "debian", "sha256": OLD_SHA},
            {"volume": f"{OLD_BASE}.sha256"},
            {"volume": "base-debian.qcow2"},
            {"volume": "base-debian.qcow2.sha256"},
            {"volume": "base-bookworm.qcow2"},
        ]
    )
    return owned | owned | foreign | other_fleet | volume_entries


def _fix_digest(raw: dict[str, Any], known: list[str], in_fleet: bool) -> dict[str, Any]:
    """A 'current' or 'as-on' digest needs the proxy's manifest and a host of fleet.yaml."""
    label = raw["digest"]
    if label != "old" and label != "older" and (raw["proxy"] not in known or not in_fleet):
        return {**raw, "digest": "old"}
    return raw


def _reachable(inventory: Inventory) -> set[str]:
    return {h.name for h in inventory.hosts if h.reachable}


@EXAMPLES
@given(worlds())
def test_no_action_ever_targets_an_unreachable_host(world: tuple[Repo, Inventory]) -> None:
    repo, inventory = world
    reachable = _reachable(inventory)
    for action in plan(repo, inventory).actions:
        assert action.host is None or action.host in reachable, action
        old = replaced(action)
        assert old is None or old.host in reachable, action


def _current_vms(repo: Repo, inventory: Inventory) -> dict[str, set[tuple[str, str]]]:
    """Per proxy with a manifest: its owned VMs (host, domain) whose digest is current there."""
    current: dict[str, set[tuple[str, str]]] = {p.name: set() for p in repo.proxies}
    for host in inventory.hosts:
        if repo.fleet.host(host.name) is None:
            continue
        for d in host.domains:
            owner = d.owner
            if owner is None or owner.fleet != repo.fleet.name or owner.proxy not in current:
                continue
            if owner.digest == desired_digest(repo, owner.proxy, host.name):
                current[owner.proxy].add((host.name, d.name))
    return current


@EXAMPLES
@given(worlds())
def test_a_proxy_with_an_unchanged_digest_is_never_deleted_or_replaced(
    world: tuple[Repo, Inventory],
) -> None:
    repo, inventory = world
    actions = plan(repo, inventory).actions
    for proxy, vms in _current_vms(repo, inventory).items():
        if not vms:
            continue
        mine = [a for a in actions if a.proxy == proxy]
        assert not [a for a in mine if a.kind is ActionKind.REPLACE]
        deleted = {(a.host, a.domain) for a in mine if a.kind is ActionKind.DELETE}
        assert vms - deleted, f"every up-to-date VM of {proxy} is deleted"
        # The kept VM: a keep, a start, or a start that suspend blocked.
        kept = (ActionKind.KEEP, ActionKind.START)
        survivors = {(a.host, a.domain) for a in mine if a.kind in kept or blocked_kind(a) in kept}
        assert len(survivors & vms) == 1, "exactly one up-to-date VM is kept or started"


@EXAMPLES
@given(worlds())
def test_every_safety_rule_holds_in_any_world(world: tuple[Repo, Inventory]) -> None:
    repo, inventory = world
    policy = repo.fleet.policy
    actions = plan(repo, inventory).actions
    kinds = [a.kind for a in actions]
    if policy.suspend:
        assert not set(kinds) & set(MUTATING)
    deletes = [a for a in actions if a.kind is ActionKind.DELETE]
    assert len(deletes) <= policy.max_deletes_per_run  # a replace deletes nothing in its run
    if not repo.proxies and not policy.allow_empty:
        assert not deletes
    owners = {
        (h.name, d.name): d.owner for h in inventory.hosts for d in h.domains if d.owner is not None
    }
    for a in actions:
        if a.kind not in (ActionKind.DELETE, ActionKind.START):
            continue
        owner = owners.get((a.host or "", a.domain or ""))
        assert owner is not None and owner.fleet == repo.fleet.name, "foreign VM touched"
        assert repo.fleet.host(a.host or "") is not None, "VM on a removed host touched"
        manifest = repo.proxy(owner.proxy)
        if a.kind is ActionKind.DELETE and manifest is None:
            assert policy.prune and not owner.protect
        if a.kind is ActionKind.DELETE and manifest is not None:
            assert not manifest.lifecycle.protect
    _assert_cleanups_touch_only_unused_volumes_of_this_fleet(repo, inventory, actions)
    _assert_nothing_running_goes_before_its_replacement_runs(repo, inventory, actions)
    _assert_relabels_change_only_protect_to_the_manifests(repo, owners, actions)
    for a in actions:
        if a.kind is ActionKind.REPLACE:
            replaced = repo.proxy(a.proxy or "")
            assert replaced is not None and not replaced.lifecycle.protect
    assert plan(repo, inventory) == plan(repo, inventory)


def _assert_cleanups_touch_only_unused_volumes_of_this_fleet(
    repo: Repo, inventory: Inventory, actions: tuple[Action, ...]
) -> None:
    named = [(a.host, a.domain) for a in actions if a.kind is not ActionKind.CLEANUP]
    for a in actions:
        if not isinstance(a, Cleanup | RemoveBase):
            continue
        host = inventory.host(a.host or "")
        assert host is not None and host.reachable and repo.fleet.host(host.name) is not None
        if isinstance(a, RemoveBase):
            _assert_base_unused(repo, host, actions, a)
            continue
        assert a.domain not in {d.name for d in host.domains}, "volumes of a domain cleaned up"
        assert (a.host, a.domain) not in named
        assert a.volumes and set(a.volumes) <= set(host.volumes)
        assert all(volume_domain(repo.fleet.name, v) is not None for v in a.volumes)
        assert not any(v.startswith("base-") for v in a.volumes)


def _assert_base_unused(
    repo: Repo, host: HostInventory, actions: tuple[Action, ...], a: RemoveBase
) -> None:
    """A base cleanup removes a base (and its marker) that nothing of the repo, of the plan
    or of any VM on a host no other fleet shares uses, on a host that gets no new VM."""
    base = a.base
    assert a.volumes[0].removesuffix(MARKER_SUFFIX) == base
    assert is_base_volume(base) and set(a.volumes) <= {base, base_marker_name(base)}
    assert set(a.volumes) <= set(host.volumes)
    new = [b for b in actions if isinstance(b, Create | Replace)]
    assert base not in {
        base_volume_name(i) for i in (*repo.fleet.images, *(b.vm.image for b in new))
    }
    assert a.host not in {b.host for b in new}, f"{a} on a host that gets a new VM"
    for d in host.domains:
        owner = d.owner
        if owner is None:
            continue
        assert owner.fleet == repo.fleet.name and owner.image_key, f"{a} on a shared host"
        recorded = {owner.image_base} if owner.image_base else legacy_base_names(owner.image_key)
        assert base not in recorded, f"{a} removes the base of {d.name}"


def _assert_relabels_change_only_protect_to_the_manifests(
    repo: Repo, owners: dict[tuple[str, str], Owner], actions: tuple[Action, ...]
) -> None:
    """A relabel follows its VM's own action, on an owned VM of a proxy with a manifest."""
    for before, a in zip((None, *actions), actions, strict=False):
        if not isinstance(a, Relabel):
            continue
        recorded = owners.get((a.host or "", a.domain or ""))
        assert recorded is not None and recorded.fleet == repo.fleet.name, "foreign VM touched"
        assert repo.fleet.host(a.host or "") is not None, "VM on a removed host touched"
        manifest = repo.proxy(recorded.proxy)
        assert manifest is not None and recorded.protect != manifest.lifecycle.protect
        assert a.owner == dataclasses.replace(recorded, protect=manifest.lifecycle.protect)
        assert before is not None and before.kind not in (ActionKind.DELETE, ActionKind.REPLACE)
        assert (before.host, before.domain) == (a.host, a.domain) or (
            replaced(before) == DomainRef(a.host or "", a.domain or "")
        ), f"{a} does not follow the action of its VM"


def _assert_nothing_running_goes_before_its_replacement_runs(
    repo: Repo, inventory: Inventory, actions: tuple[Action, ...]
) -> None:
    """A proxy with a manifest loses a running or outdated VM only while its kept VM runs."""
    states = {(h.name, d.name): d.state for h in inventory.hosts for d in h.domains}
    current = _current_vms(repo, inventory)
    for a in actions:
        if a.kind is not ActionKind.DELETE or a.proxy not in current:
            continue
        target = (a.host or "", a.domain or "")
        if states[target] is not DomainState.RUNNING and target in current[a.proxy]:
            continue  # an idle duplicate may go at any time
        kept = [k for k in actions if k.proxy == a.proxy and k.kind is ActionKind.KEEP]
        assert kept, f"{a} deletes a VM of {a.proxy} but keeps none"
        assert states[(kept[0].host or "", kept[0].domain or "")] is DomainState.RUNNING, a


def _second_steps(first: Plan) -> set[tuple[str | None, str | None]]:
    """VMs the first plan already meant to delete: replaced ones, waiting or limited deletes."""
    allowed = {(old.host, old.domain) for a in first.actions if (old := replaced(a))}
    allowed |= {(a.host, a.domain) for a in first.actions if blocked_kind(a) is ActionKind.DELETE}
    return allowed


def _limited_replaces(first: Plan) -> set[tuple[str | None, DomainRef | None]]:
    """Replaces the first plan meant and held back: for maxDeletesPerRun, or for a later
    rollout batch (the plan that deletes a finished replace's old VM starts the next one)."""
    return {
        (a.proxy, replaced(a))
        for a in first.actions
        if blocked_kind(a) is ActionKind.REPLACE
        and (
            a.reason.startswith("beyond maxDeletesPerRun")
            or ": waits until the replaces" in a.reason
        )
    }


@EXAMPLES
@given(worlds(capacity=False), st.booleans())
def test_planning_again_after_applying_leaves_only_keeps_and_second_steps(
    world: tuple[Repo, Inventory], healthy: bool
) -> None:
    repo, inventory = world
    first = plan(repo, inventory)
    second = plan(repo, apply_plan(repo, inventory, first, healthy=healthy))
    second_steps = _second_steps(first)
    for a in second.actions:
        assert a.kind not in (ActionKind.CREATE, ActionKind.START), a
        if a.kind is ActionKind.REPLACE:
            assert (a.proxy, replaced(a)) in _limited_replaces(first), a
        if a.kind in (ActionKind.DELETE, ActionKind.RELABEL):
            assert (a.host, a.domain) in second_steps, a


@EXAMPLES
@given(worlds())
def test_applying_plans_reaches_a_plan_without_changes(world: tuple[Repo, Inventory]) -> None:
    repo, inventory = world
    for _ in range(12):
        result = plan(repo, inventory)
        if not any(a.kind in MUTATING for a in result.actions):
            return
        inventory = apply_plan(repo, inventory, result, healthy=len(result.actions) % 2 == 0)
    raise AssertionError(f"still changing after 12 rounds: {result.actions}")


def test_the_generated_worlds_reach_every_action_kind() -> None:
    """Guards the generator: properties over worlds that never delete would prove nothing."""
    seen: set[ActionKind] = set()

    @settings(max_examples=400, deadline=None, derandomize=True)
    @given(worlds())
    def collect(world: tuple[Repo, Inventory]) -> None:
        seen.update(a.kind for a in plan(*world).actions)
        seen.update(b for a in plan(*world).actions if (b := blocked_kind(a)) is not None)

    collect()
    assert seen == set(ActionKind)


# -- day 2: rollouts, halts, the probe-path guard -----------------------------------------


@st.composite
def day2_worlds(draw: Callable[..., Any]) -> tuple[Repo, Inventory, History]:
    """A world with a rollout policy, crashed VMs and what earlier runs saw about them."""
    repo, inventory = draw(worlds())
    amount = st.integers(0, 3) | st.sampled_from(["0%", "25%", "50%", "100%"])
    rollout = {"maxSurge": draw(amount), "maxUnavailable": draw(amount)}
    policy = repo.fleet.policy
    repo = dataclasses.replace(
        repo,
        fleet=dataclasses.replace(
            repo.fleet,
            policy=dataclasses.replace(
                policy,
                rollout=build_repo({"policy": {"rollout": rollout}}, []).fleet.policy.rollout,
            ),
        ),
    )
    hosts = []
    records = []
    for host in inventory.hosts:
        domains = []
        for domain in host.domains:
            if domain.state is DomainState.SHUTOFF and draw(st.booleans()):
                domain = dataclasses.replace(domain, reason="crashed")
            domains.append(domain)
            if domain.owner is not None and draw(st.integers(0, 2)) > 0:
                failing = draw(st.sampled_from([None, 100, 1000, 5000]))
                since = None if failing is None else NOW - timedelta(seconds=failing)
                records.append(
                    (
                        DomainRef(host.name, domain.name),
                        VmRecord(
                            failing_since=since,
                            healthy_once=draw(st.booleans()),
                            restarts=(NOW - timedelta(seconds=60),) * draw(st.integers(0, 4)),
                        ),
                    )
                )
        hosts.append(dataclasses.replace(host, domains=tuple(domains)))
    halts: tuple[Halt, ...] = ()
    if repo.proxies and draw(st.integers(0, 3)) == 0:
        halts = (Halt("r1", repo.proxies[0].name, "pf-home-x-00000000", "not healthy", NOW),)
    history = History(now=NOW, vms=tuple(records), halts=halts, revision="r1")
    return repo, Inventory(hosts=tuple(hosts)), history


def _zone_sizes(repo: Repo) -> Counter[str]:
    return Counter(p.placement.zone for p in repo.proxies)


@EXAMPLES
@given(day2_worlds())
def test_a_rollout_batch_never_holds_more_replaces_of_a_zone_than_its_batch_size(
    world: tuple[Repo, Inventory, History],
) -> None:
    repo, inventory, history = world
    zone_of = {p.name: p.placement.zone for p in repo.proxies}
    per_zone: Counter[str] = Counter()
    for action in plan(repo, inventory, history).actions:
        if isinstance(action, Replace):
            assert action.batch == 1  # later batches wait, blocked, for a later plan
            per_zone[zone_of[action.proxy or ""]] += 1
    sizes = _zone_sizes(repo)
    for zone, count in per_zone.items():
        assert count <= repo.fleet.policy.rollout.batch_size(sizes[zone]), zone


@EXAMPLES
@given(day2_worlds())
def test_a_halted_rollout_plans_no_replace(world: tuple[Repo, Inventory, History]) -> None:
    repo, inventory, history = world
    if not history.halts:
        history = dataclasses.replace(
            history, halts=(Halt("r1", "web-1", "pf-home-web-1-00000000", "no IP", NOW),)
        )
    result = plan(repo, inventory, history)
    assert not [a for a in result.actions if isinstance(a, Replace)]


@EXAMPLES
@given(day2_worlds())
def test_self_healing_never_replaces_a_failing_vm_when_half_its_zone_fails_at_once(
    world: tuple[Repo, Inventory, History],
) -> None:
    repo, inventory, history = world
    failing_by_zone: Counter[str] = Counter()
    for proxy in repo.proxies:
        running = [
            (h.name, d.name)
            for h in inventory.hosts
            if h.reachable and repo.fleet.host(h.name) is not None
            for d in h.domains
            if d.owner is not None
            and d.owner.fleet == repo.fleet.name
            and d.owner.proxy == proxy.name
            and d.state is DomainState.RUNNING
            and d.owner.digest == desired_digest(repo, proxy.name, h.name)
        ]
        if any(history.failing_for(*vm) is not None for vm in running):
            failing_by_zone[proxy.placement.zone] += 1
    sizes = _zone_sizes(repo)
    result = plan(repo, inventory, history)
    for action in result.actions:
        if isinstance(action, Replace) and "probe" in action.reason:
            zone = repo.proxy(action.proxy or "").placement.zone  # type: ignore[union-attr]
            failing = failing_by_zone[zone]
            assert not (failing >= 2 and 2 * failing >= sizes[zone]), action


@EXAMPLES
@given(day2_worlds())
def test_no_old_vm_is_planned_for_delete_before_its_successor_passed_a_check(
    world: tuple[Repo, Inventory, History],
) -> None:
    repo, inventory, history = world
    for action in plan(repo, inventory, history, Limits(replace_timeout=600)).actions:
        if isinstance(action, Delete) and action.keeper is not None:
            record = history.record(action.keeper.host, action.keeper.domain)
            assert record.healthy_once and record.failing_since is None, action
