"""Which VM speaks for each proxy after a run acted, as case files: tests/target_cases/<rule>.yaml.

A case is a world in the plan cases' format (tests/planworld.py: ``fleet``, ``proxies``,
``inventory``, ``history``), planned by the planner, then the run's ``outcomes``:
``{proxy, action, result, error}`` for each action that ran (``action`` its kind, and
``domain`` when the proxy has two of that kind; unlisted actions did not run). ``expect``
is every target of reconciler.core.status.targets in order: ``proxy`` and ``state``
always, ``fresh`` (made or started in this run) and ``old`` (the VM it moves away from
that still serves: ``{host, state}``, ``domain`` when given) compared always (left out:
false, none); ``host``, ``domain`` and ``zone`` when given, ``detail`` as a substring when
given (``""``: none).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from planworld import build_history, build_inventory, build_repo
from ruamel.yaml import YAML

from reconciler.core.plan.planner import plan
from reconciler.core.status.targets import Target, targets
from reconciler.model import Action, Plan
from reconciler.model.report import ActionOutcome, ActionResult, ProxyStatus

CASES = sorted((Path(__file__).parent / "target_cases").glob("*.yaml"))


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = YAML(typ="safe").load(path.read_text())
    return data


def test_there_are_cases_and_each_describes_itself() -> None:
    assert len(CASES) >= 6
    for path in CASES:
        assert _load(path).get("description"), f"{path.name} has no description"


def _outcomes(result: Plan, listed: list[dict[str, Any]]) -> dict[Action, ActionOutcome]:
    found: dict[Action, ActionOutcome] = {}
    for entry in listed:
        matching = [
            a
            for a in result.actions
            if a.proxy == entry["proxy"]
            and a.kind.value == entry["action"]
            and entry.get("domain", a.domain) == a.domain
        ]
        assert len(matching) == 1, f"outcome {entry} matches {len(matching)} actions"
        action = matching[0]
        result_of = ActionResult(entry.get("result", "succeeded"))
        found[action] = ActionOutcome(action, result_of, error=entry.get("error", ""))
    return found


def _shown(target: Target) -> str:
    status, old = target.status, target.old
    line = f"{status.name}: {status.state.value} {status.host}/{status.domain} zone={status.zone}"
    line += f" fresh={target.fresh} detail={status.detail!r}"
    if old is not None:
        line += f" old={old.host}/{old.domain} {old.state.value}"
    return line


def _status_matches(status: ProxyStatus, want: dict[str, Any]) -> bool:
    detail = want.get("detail")
    if detail is not None and (detail not in status.detail or (not detail and status.detail)):
        return False
    return status.state.value == want["state"] and all(
        getattr(status, key) == want[key] for key in ("host", "domain", "zone") if key in want
    )


def _matches(target: Target, want: dict[str, Any]) -> bool:
    old = want.get("old")
    if (old is None) != (target.old is None):
        return False
    if old is not None and target.old is not None and not _status_matches(target.old, old):
        return False
    return (
        target.status.name == want["proxy"]
        and target.fresh == want.get("fresh", False)
        and _status_matches(target.status, want)
    )


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_target_case(path: Path) -> None:
    case = _load(path)
    repo = build_repo(case.get("fleet"), case.get("proxies") or [])
    inventory = build_inventory(repo, case.get("inventory"))
    result = plan(repo, inventory, build_history(inventory, case.get("history")))
    found = targets(repo, result, inventory, _outcomes(result, case.get("outcomes") or []))
    shown = "\n".join(_shown(t) for t in found)
    expected = case.get("expect") or []
    assert len(found) == len(expected), shown
    for target, want in zip(found, expected, strict=True):
        assert _matches(target, want), f"expected {want}\n got:\n{shown}"
