"""Every planner rule as a case file: tests/plan_cases/<rule>.yaml (format: tests/planworld.py).

A case lists the whole expected plan, in order. Each expected action compares
``action``, ``proxy``, ``host``, ``blocks`` and ``replaces`` always (left out
means "none"), ``domain`` when given, ``reason`` as a substring when given, and
``protect`` (the flag a relabel writes) when given.
On top of its own expectations every case must hold the invariants below. A
case with ``xfail: <why>`` documents a known gap and must fail (strict).

A case may go on with ``then: {proxies: [...], fleet: {...}, expect: [...]}``:
its plan is played out (planworld.apply_plan: every unblocked action
succeeds), the repo becomes ``then``'s proxies (and fleet, by default the
case's), and ``then.expect`` is the whole plan of that second run.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import pytest
from planworld import apply_plan, build_inventory, build_repo, desired_digest
from ruamel.yaml import YAML

from reconciler.core.naming import domain_name, volume_domain
from reconciler.core.planner import plan
from reconciler.model import Action, ActionKind, Inventory, Plan, Repo
from reconciler.model.vm import vm_volumes

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
    inventory = build_inventory(repo, case.get("inventory"))
    result = _step(repo, inventory, case.get("expect") or [])
    then = case.get("then")
    if then is not None:
        after = apply_plan(repo, inventory, result)
        repo = build_repo(then.get("fleet", case.get("fleet")), then.get("proxies") or [])
        _step(repo, after, then.get("expect") or [])


def _step(repo: Repo, inventory: Inventory, expected: list[dict[str, Any]]) -> Plan:
    result = plan(repo, inventory)
    _assert_invariants(repo, inventory, result)
    got = [_render(a) for a in result.actions]
    assert len(result.actions) == len(expected), "\n".join(got)
    for action, want in zip(result.actions, expected, strict=True):
        assert _matches(action, want), f"expected {want}\n got:\n" + "\n".join(got)
    return result


def _render(a: Action) -> str:
    replaces = f" replaces={a.replaces.host}/{a.replaces.domain}" if a.replaces else ""
    blocks = f" blocks={a.blocks}" if a.blocks else ""
    return f"{a.kind} {a.proxy} {a.host} {a.domain}{blocks}{replaces}: {a.reason}"


def _matches(action: Action, want: dict[str, Any]) -> bool:
    blocks = ActionKind(want["blocks"]) if "blocks" in want else None
    checks = [
        action.kind == ActionKind(want["action"]),
        action.proxy == want.get("proxy"),
        action.host == want.get("host"),
        action.blocks == blocks,
        want.get("reason", "") in action.reason,
        "domain" not in want or action.domain == want["domain"],
        "protect" not in want
        or (action.owner is not None and action.owner.protect == want["protect"]),
    ]
    replaces = want.get("replaces")
    if replaces is None:
        checks.append(action.replaces is None)
    else:
        host, _, domain = replaces.partition("/")
        checks.append(action.replaces is not None and action.replaces.host == host)
        checks.append(
            not domain or (action.replaces is not None and action.replaces.domain == domain)
        )
    return all(checks)


def _assert_invariants(repo: Repo, inventory: Inventory, result: Plan) -> None:
    reachable = {h.name for h in inventory.hosts if h.reachable}
    for a in result.actions:
        assert a.reason, f"{a} has no reason"
        assert a.host is None or a.host in reachable, f"{a} targets an unreachable host"
        assert a.replaces is None or a.replaces.host in reachable
        assert (a.kind is ActionKind.BLOCKED) == (a.blocks is not None)
        assert (a.owner is not None) == (ActionKind.RELABEL in (a.kind, a.blocks))
        new_vm = a.kind in (ActionKind.CREATE, ActionKind.REPLACE)
        if new_vm or (a.blocks in (ActionKind.CREATE, ActionKind.REPLACE) and a.host):
            assert a.proxy is not None and a.host is not None and a.digest is not None
            assert a.digest == desired_digest(repo, a.proxy, a.host)
            assert a.domain == domain_name(repo.fleet.name, a.proxy, a.digest)
        if ActionKind.CLEANUP in (a.kind, a.blocks):
            _assert_safe_cleanup(repo, inventory, result, a)
    assert all(
        not a.volumes for a in result.actions if ActionKind.CLEANUP not in (a.kind, a.blocks)
    )
    # Deterministic, whatever order the inventory lists hosts and domains in.
    assert plan(repo, inventory) == result
    shuffle = random.Random(7)
    shuffled = [
        dataclasses.replace(h, domains=tuple(shuffle.sample(h.domains, len(h.domains))))
        for h in reversed(inventory.hosts)
    ]
    assert plan(repo, Inventory(hosts=tuple(shuffled))) == result


def _assert_safe_cleanup(repo: Repo, inventory: Inventory, result: Plan, a: Action) -> None:
    """A cleanup names only this fleet's volume names, present on its host, of a domain that
    neither exists there nor is named by any other action of the plan on that host."""
    host = inventory.host(a.host or "")
    assert host is not None and host.reachable and repo.fleet.host(host.name) is not None
    assert a.domain is not None and a.proxy is None
    assert a.volumes and set(a.volumes) <= set(host.volumes)
    assert list(a.volumes) == [v for v in vm_volumes(a.domain) if v in a.volumes]
    for volume in a.volumes:
        found = volume_domain(repo.fleet.name, volume)
        assert found is not None and found[0] == a.domain
    assert a.domain not in {d.name for d in host.domains}
    others = [b for b in result.actions if b is not a and (b.host, b.domain) == (a.host, a.domain)]
    assert others == [], f"{a} and {others} name the same domain"
