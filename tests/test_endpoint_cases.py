"""The DNS names a run implies, and the changes that publish them, as case files:
tests/endpoint_cases/<rule>.yaml.

A case gives ``members`` (the repo's proxies as the run left them), ``present`` (the
zone as the server has it; relative names) and optionally ``policy`` (sync by default)
and ``fleet`` (demo). ``expect.records`` is every wanted name with its addresses,
``expect.changes`` every change in order, ``expect.conflicts`` (substrings, in order)
and ``expect.owned`` when given.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

from reconciler.core.endpoints.changes import Present, diff, published
from reconciler.core.endpoints.records import Member, record_set
from reconciler.model.report import Health
from reconciler.model.settings import DnsPolicy

CASES = sorted((Path(__file__).parent / "endpoint_cases").glob("*.yaml"))


def _member(entry: dict[str, Any]) -> Member:
    return Member(
        proxy=entry["proxy"],
        zone=entry.get("zone", ""),
        proxy_set=entry.get("set", ""),
        address=entry.get("address", ""),
        health=Health(entry.get("health", "unknown")),
    )


def _present(entry: dict[str, Any]) -> Present:
    return Present(
        name=entry["name"],
        a=tuple(entry.get("a", ())),
        aaaa=tuple(entry.get("aaaa", ())),
        txt=tuple(entry.get("txt", ())),
    )


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_endpoint_case(path: Path) -> None:
    case = YAML(typ="safe").load(path.read_text())
    fleet = case.get("fleet", "demo")
    present = [_present(e) for e in case.get("present") or ()]
    wanted = record_set(
        [_member(m) for m in case["members"]], published=published(present, fleet=fleet)
    )
    expect = case["expect"]
    assert {e.name: list(e.addresses) for e in wanted} == expect["records"]
    found = diff(wanted, present, fleet=fleet, policy=DnsPolicy(case.get("policy", "sync")))
    assert [{"op": c.op.value, "name": c.name} for c in found.changes] == expect["changes"]
    conflicts = expect.get("conflicts", [])
    assert len(found.conflicts) == len(conflicts)
    for sentence, part in zip(found.conflicts, conflicts, strict=True):
        assert part in sentence
    if "owned" in expect:
        assert found.owned == expect["owned"]


def test_every_case_file_is_run() -> None:
    assert len(CASES) >= 10
