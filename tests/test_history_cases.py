"""What a run hands on to the next, as case files: tests/history_cases/<rule>.yaml.

A case gives the history ``before`` the run and the run itself: its ``revision`` (r1 by
default), ``now``, the ``hosts`` as observed (each with its domains and their state), the
``outcomes`` of its actions, the ``new_halts`` its plan found and the ``proxies`` it
checked; ``after`` is the history folded from them. The plan's halts are those kept for
its revision (``for_plan``) and the new ones, as the planner hands them on. ``then:``
runs follow, each from the history the one before left. Times are ``HH:MM`` on one day
(UTC). Only ``start`` outcomes are read by the fold; other kinds are listed for the story
(``create``, ``replace`` and ``delete`` change nothing by themselves).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler.core.status.history import after_run, for_plan
from reconciler.model import Domain, DomainRef, DomainState, HostInventory, Inventory, Owner
from reconciler.model.history import Halt, History, VmRecord
from reconciler.model.plan import Action, Delete, Keep, Start
from reconciler.model.report import ActionOutcome, ActionResult, Health, ProxyStatus

CASES = sorted((Path(__file__).parent / "history_cases").glob("*.yaml"))


def _time(text: str | None) -> datetime | None:
    if text is None:
        return None
    hour, minute = (int(part) for part in str(text).split(":"))
    return datetime(2026, 12, 1, hour, minute, tzinfo=UTC)


def _at(text: str) -> datetime:
    when = _time(text)
    assert when is not None
    return when


def _history(entry: dict[str, Any] | None) -> History:
    entry = entry or {}
    vms = tuple(
        (
            DomainRef(vm["host"], vm["domain"]),
            VmRecord(
                failing_since=_time(vm.get("failing_since")),
                healthy_once=vm.get("healthy_once", False),
                restarts=tuple(_at(t) for t in vm.get("restarts", ())),
                healthy_since=_time(vm.get("healthy_since")),
            ),
        )
        for vm in entry.get("vms") or ()
    )
    return History(vms=vms, halts=_halts(entry.get("halts")))


def _halts(entries: list[dict[str, Any]] | None) -> tuple[Halt, ...]:
    return tuple(
        Halt(h["revision"], h["proxy"], h["domain"], h["reason"], _at(h["since"]))
        for h in entries or ()
    )


def _inventory(entries: list[dict[str, Any]]) -> Inventory:
    hosts = []
    for host in entries:
        domains = tuple(
            Domain(d["name"], DomainState(d["state"]), Owner("home", d.get("proxy", "web-1"), ""))
            for d in host.get("domains") or ()
        )
        hosts.append(HostInventory(host["name"], host.get("reachable", True), domains=domains))
    return Inventory(hosts=tuple(hosts))


def _outcome(entry: dict[str, Any]) -> ActionOutcome:
    kinds: dict[str, type[Action]] = {"start": Start, "delete": Delete}
    where = {"proxy": entry.get("proxy"), "host": entry["host"], "domain": entry["domain"]}
    kind = kinds.get(entry["action"], Keep)  # create, replace: not read by the fold
    return ActionOutcome(kind(reason=entry["action"], **where), ActionResult(entry["result"]))


def _proxy(entry: dict[str, Any]) -> ProxyStatus:
    return ProxyStatus(
        entry["name"],
        entry["host"],
        entry["domain"],
        state=entry.get("state", "running"),
        health=Health(entry.get("health", "unknown")),
    )


def _run(before: History, run: dict[str, Any]) -> History:
    now = _at(run["now"])
    planned = for_plan(before, now=now, revision=run.get("revision", "r1"))
    return after_run(
        before,
        inventory=_inventory(run["hosts"]),
        halts=(*planned.halts, *_halts(run.get("new_halts"))),
        outcomes=[_outcome(o) for o in run.get("outcomes") or ()],
        proxies=[_proxy(p) for p in run.get("proxies") or ()],
        now=now,
    )


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_history_case(path: Path) -> None:
    case = YAML(typ="safe").load(path.read_text())
    history = _history(case.get("before"))
    for step, run in enumerate([case, *case.get("then", ())]):
        history = _run(history, run)
        assert history == _history(run["after"]), f"run {step + 1} of {path.name}"


def test_every_case_file_is_run() -> None:
    assert len(CASES) >= 7
