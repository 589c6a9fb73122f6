"""Every planner rule as a case file: tests/plan_cases/<rule>.yaml (format: tests/planworld.py).

A case lists the whole expected plan, in order. Each expected action compares
``action``, ``proxy``, ``host``, ``blocks`` and ``replaces`` always (left out
means "none"), ``domain`` when given, ``reason`` as a substring when given,
``protect`` (the flag a relabel writes) when given, ``volumes`` (those a
cleanup removes, in order) when given, and ``recreate`` (a delete that starts a
fixed-address proxy's recreate) when given.
On top of its own expectations every case must hold the invariants below. A
case with ``xfail: <why>`` documents a known gap and must fail (strict).

A case with ``shrink:`` states what the shrink gate (reconciler.core.plan.gates.shrink)
finds in its repo and inventory before any planning: ``null`` (none), or ``{lost, owned,
desired, acknowledged}``; the plan it expects is the one an acknowledged shrink gets.

A case may go on with ``then: {proxies: [...], fleet: {...}, expect: [...]}``:
its plan is played out (planworld.apply_plan: every unblocked action
succeeds; with ``healthy: true`` in ``then``, replaced VMs are deleted too),
the repo becomes ``then``'s proxies (and fleet, by default the
case's), and ``then.expect`` is the whole plan of that second run. A ``then``
may hold a ``then`` of its own.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
from planworld import apply_plan, build_history, build_inventory, build_repo, desired_digest
from ruamel.yaml import YAML

from reconciler.core.naming import domain_name, resolve_image, volume_domain
from reconciler.core.plan.gates import shrink
from reconciler.core.plan.planner import plan
from reconciler.model import Action, ActionKind, HostInventory, Inventory, Owner, Plan, Repo
from reconciler.model.history import History
from reconciler.model.limits import Limits
from reconciler.model.plan import (
    Blocked,
    Cleanup,
    Create,
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
    vm_volumes,
)

CASES = Path(__file__).parent / "plan_cases"
CASE_FILES = sorted(CASES.glob("*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe").load(path.read_text())
    return data


def _params() -> list[Any]:
    params = []
    for path in CASE_FILES:
        case = _load(path)
        marks = []
        if "xfail" in case:
            marks.append(pytest.mark.xfail(reason=case["xfail"], strict=True))
        params.append(pytest.param(path, id=path.stem, marks=marks))
    return params


def test_there_are_at_least_thirty_cases_and_each_describes_itself() -> None:
    assert len(CASE_FILES) >= 30
    for path in CASE_FILES:
        assert _load(path).get("description"), f"{path.name} has no description"


@pytest.mark.parametrize("path", _params())
def test_plan_case(path: Path) -> None:
    case = _load(path)
    repo = build_repo(case.get("fleet"), case.get("proxies") or [])
    inventory = build_inventory(repo, case.get("inventory"), case.get("baseSizes"))
    history = build_history(inventory, case.get("history"))
    limits = Limits(
        replace_timeout=case.get("replaceTimeout"),
        deletes_left=case.get("deletesLeft"),
        deletes_why=case.get("deletesWhy", ""),
    )
    if "shrink" in case:
        _assert_shrink(repo, inventory, case["shrink"])
    result = _step(repo, inventory, case.get("expect") or [], history, limits)
    _assert_halts(result, case)
    fleet, then = case.get("fleet"), case.get("then")
    while then is not None:
        inventory = apply_plan(repo, inventory, result, healthy=then.get("healthy", False))
        fleet = then.get("fleet", fleet)
        repo = build_repo(fleet, then.get("proxies") or [])
        history = build_history(inventory, then["history"]) if "history" in then else None
        limits = dataclasses.replace(
            limits,
            replace_timeout=then.get("replaceTimeout", limits.replace_timeout),
            deletes_left=then.get("deletesLeft", limits.deletes_left),
        )
        result = _step(repo, inventory, then.get("expect") or [], history, limits)
        _assert_halts(result, then)
        then = then.get("then")


def _assert_shrink(repo: Repo, inventory: Inventory, want: dict[str, Any] | None) -> None:
    found = shrink(repo, inventory)
    got = None if found is None else dataclasses.asdict(found)
    assert got == want, f"shrink: expected {want}, got {got}"


def _assert_halts(result: Plan, case: dict[str, Any]) -> None:
    """``suspectZones`` and ``halts`` (the proxies whose new VM failed), when the case says."""
    if "suspectZones" in case:
        assert list(result.suspect_zones) == case["suspectZones"]
    if "halts" in case:
        assert [h.proxy for h in result.halts] == case["halts"]


def _step(
    repo: Repo,
    inventory: Inventory,
    expected: list[dict[str, Any]],
    history: History | None = None,
    limits: Limits | None = None,
) -> Plan:
    result = plan(repo, inventory, history, limits)
    _assert_invariants(repo, inventory, result, history, limits)
    got = [_render(a) for a in result.actions]
    assert len(result.actions) == len(expected), "\n".join(got)
    for action, want in zip(result.actions, expected, strict=True):
        assert _matches(action, want), f"expected {want}\n got:\n" + "\n".join(got)
    return result


def _render(a: Action) -> str:
    old, stopped = replaced(a), blocked_kind(a)
    replaces = f" replaces={old.host}/{old.domain}" if old else ""
    blocks = f" blocks={stopped}" if stopped else ""
    return f"{a.kind} {a.proxy} {a.host} {a.domain}{blocks}{replaces}: {a.reason}"


def _matches(action: Action, want: dict[str, Any]) -> bool:
    blocks = ActionKind(want["blocks"]) if "blocks" in want else None
    owner = _owner(action)
    old = replaced(action)
    checks = [
        action.kind == ActionKind(want["action"]),
        action.proxy == want.get("proxy"),
        action.host == want.get("host"),
        blocked_kind(action) == blocks,
        want.get("reason", "") in action.reason,
        "domain" not in want or action.domain == want["domain"],
        "protect" not in want or (owner is not None and owner.protect == want["protect"]),
        "batch" not in want or (isinstance(action, Replace) and action.batch == want["batch"]),
        "volumes" not in want or list(getattr(action, "volumes", ())) == want["volumes"],
        "recreate" not in want or getattr(action, "recreate", False) == want["recreate"],
    ]
    replaces = want.get("replaces")
    if replaces is None:
        checks.append(old is None)
    else:
        host, _, domain = replaces.partition("/")
        checks.append(old is not None and old.host == host)
        checks.append(not domain or (old is not None and old.domain == domain))
    return all(checks)


def _assert_resolved(repo: Repo, a: Create | Replace) -> None:
    """A new VM carries exactly what the repo says its proxy and host are made of."""
    proxy, host = repo.proxy(a.proxy or ""), repo.fleet.host(a.host or "")
    assert proxy is not None and host is not None
    assert a.vm.host == host and a.vm.proxy == proxy.name and a.vm.fleet == repo.fleet.name
    assert a.vm.machine_type == repo.fleet.machine_type(proxy.placement.machine_type)
    assert a.vm.image == resolve_image(repo.fleet, proxy.placement.image)
    assert a.vm.cloud_init == proxy.cloud_init and a.vm.health == proxy.health
    assert a.vm.protect == proxy.lifecycle.protect


def _owner(action: Action) -> Owner | None:
    """The ownership record a relabel (or a blocked one) writes."""
    return action.owner if isinstance(action, Relabel | Blocked) else None


def _assert_invariants(
    repo: Repo,
    inventory: Inventory,
    result: Plan,
    history: History | None = None,
    limits: Limits | None = None,
) -> None:
    reachable = {h.name for h in inventory.hosts if h.reachable}
    for a in result.actions:
        assert a.reason, f"{a} has no reason"
        assert a.host is None or a.host in reachable, f"{a} targets an unreachable host"
        old, stopped = replaced(a), blocked_kind(a)
        assert old is None or old.host in reachable
        assert (a.kind is ActionKind.BLOCKED) == (stopped is not None)
        assert (_owner(a) is not None) == (ActionKind.RELABEL in (a.kind, stopped))
        new_vm = a.kind in (ActionKind.CREATE, ActionKind.REPLACE)
        if isinstance(a, Create | Replace):
            _assert_resolved(repo, a)
        if new_vm or (stopped in (ActionKind.CREATE, ActionKind.REPLACE) and a.host):
            assert a.proxy is not None and a.host is not None and a.digest is not None
            assert a.digest == desired_digest(repo, a.proxy, a.host)
            plain = domain_name(repo.fleet.name, a.proxy, a.digest)
            held = stopped is ActionKind.REPLACE and a.domain != plain  # a held heal or drain
            if (isinstance(a, Replace) and a.heal) or held:  # same spec: a name generation
                names = {domain_name(repo.fleet.name, a.proxy, a.digest, g) for g in range(1, 9)}
                assert old is not None and a.domain in names and a.domain != old.domain, a
            else:
                assert a.domain == plain
        if ActionKind.CLEANUP in (a.kind, stopped):
            _assert_safe_cleanup(repo, inventory, result, a)
    for a in result.actions:
        if isinstance(a, Blocked) and a.blocks is not ActionKind.CLEANUP:
            assert not a.volumes, f"{a} carries volumes"
        _assert_one_address(repo, inventory, a)
    # Deterministic, whatever order the inventory lists hosts and domains in.
    assert plan(repo, inventory, history, limits) == result
    shuffle = random.Random(7)
    shuffled = [
        dataclasses.replace(h, domains=tuple(shuffle.sample(h.domains, len(h.domains))))
        for h in reversed(inventory.hosts)
    ]
    reordered = Inventory(hosts=tuple(shuffled), base_sizes=inventory.base_sizes[::-1])
    assert plan(repo, reordered, history, limits) == result


def _assert_one_address(repo: Repo, inventory: Inventory, a: Action) -> None:
    """A fixed-address proxy gets a new VM only by a create, when it has no VM left."""
    proxy = repo.proxy(a.proxy or "")
    if proxy is None or proxy.network is None or not isinstance(a, Create | Replace):
        return
    assert isinstance(a, Create), f"{a}: a fixed-address proxy is recreated, never replaced"
    held = [
        d.name
        for h in inventory.hosts
        for d in h.domains
        if d.owner is not None and d.owner.fleet == repo.fleet.name and d.owner.proxy == a.proxy
    ]
    assert held == [], f"{a}: its address would exist twice (beside {held})"


def _assert_safe_cleanup(repo: Repo, inventory: Inventory, result: Plan, a: Action) -> None:
    """A cleanup names only this fleet's volume names, present on its host, of a domain that
    neither exists there nor is named by any other action of the plan on that host."""
    assert isinstance(a, Cleanup | RemoveBase | Blocked)
    host = inventory.host(a.host or "")
    assert host is not None and host.reachable and repo.fleet.host(host.name) is not None
    if a.domain is None:
        _assert_safe_base_cleanup(repo, host, result, a)
        return
    assert a.domain is not None and a.proxy is None
    assert a.volumes and set(a.volumes) <= set(host.volumes)
    assert list(a.volumes) == [v for v in vm_volumes(a.domain) if v in a.volumes]
    for volume in a.volumes:
        found = volume_domain(repo.fleet.name, volume)
        assert found is not None and found[0] == a.domain
    assert a.domain not in {d.name for d in host.domains}
    others = [b for b in result.actions if b is not a and (b.host, b.domain) == (a.host, a.domain)]
    assert others == [], f"{a} and {others} name the same domain"


def _assert_safe_base_cleanup(repo: Repo, host: HostInventory, result: Plan, a: Action) -> None:
    """A base cleanup names a base (then its marker) present on its host that no image of the
    repo and no VM of this fleet there uses, on a host no other fleet shares and that gets no
    new VM in this plan."""
    assert isinstance(a, RemoveBase | Blocked) and a.proxy is None and a.digest is None
    assert a.volumes and set(a.volumes) <= set(host.volumes)
    base = a.volumes[0].removesuffix(MARKER_SUFFIX)
    assert is_base_volume(base)
    assert list(a.volumes) == [v for v in (base, base_marker_name(base)) if v in host.volumes]
    images = [resolve_image(repo.fleet, p.placement.image) for p in repo.proxies]
    needed = {base_volume_name(i) for i in (*repo.fleet.images, *images) if i is not None}
    new = [b.vm.image for b in result.actions if isinstance(b, Create | Replace)]
    needed |= {base_volume_name(i) for i in new}
    assert base not in needed, f"{a} removes a base the repo or the plan needs"
    assert not [b for b in result.actions if isinstance(b, Create | Replace) and b.host == a.host]
    for d in host.domains:
        if d.owner is None:
            continue
        assert d.owner.fleet == repo.fleet.name, f"{a} on a host shared with another fleet"
        assert d.owner.image_key, f"{a} beside a VM that records no image"
        owner = d.owner
        recorded = {owner.image_base} if owner.image_base else legacy_base_names(owner.image_key)
        assert base not in recorded, f"{a} removes the base of {d.name}"
