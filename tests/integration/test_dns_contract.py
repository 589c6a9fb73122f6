"""One contract, two DNS publishers: the same cases against ``FakePublisher`` and the RFC 2136
publisher on a real BIND 9 (tests/bindserver.py, a fresh server per test).

The fake zone stands in for the DNS server in the engine's unit tests, so what it
creates, removes, leaves alone and reports must be what BIND ends up holding. Setup that
is not part of the seam (a record someone else put in the zone) goes through the side.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import pytest
from bindserver import ZONE, Bind

from reconciler.adapters.dns.fakepublisher import FakePublisher
from reconciler.adapters.dns.rfc2136 import Rfc2136Publisher
from reconciler.core.endpoints.changes import Present
from reconciler.core.endpoints.records import Member
from reconciler.model.report import DnsResult, Health
from reconciler.model.settings import DnsPolicy

PORT = 18553
FLEET = "demo"


class Side(Protocol):
    def publisher(self, policy: DnsPolicy = DnsPolicy.SYNC) -> FakePublisher | Rfc2136Publisher:
        """The publisher under test (the same zone whatever the policy)."""

    def a(self, name: str) -> list[str]:
        """The A records ``name`` holds, sorted."""

    def foreign(self, name: str, address: str, *, txt: str = "") -> None:
        """An A record (and a TXT) someone else put in the zone."""


class FakeSide:
    def __init__(self) -> None:
        self.zone: dict[str, Present] = {}

    def publisher(self, policy: DnsPolicy = DnsPolicy.SYNC) -> FakePublisher:
        fake = FakePublisher(policy=policy)
        fake.names = self.zone
        return fake

    def a(self, name: str) -> list[str]:
        held = self.zone.get(name)
        return [] if held is None else sorted(held.a)

    def foreign(self, name: str, address: str, *, txt: str = "") -> None:
        self.zone[name] = Present(name, (address,), (), (txt,) if txt else ())


class BindSide:
    def __init__(self, bind: Bind) -> None:
        self.bind = bind

    def publisher(self, policy: DnsPolicy = DnsPolicy.SYNC) -> Rfc2136Publisher:
        return Rfc2136Publisher(self.bind.settings(policy=policy))

    def a(self, name: str) -> list[str]:
        return self.bind.dig(name, "A")

    def foreign(self, name: str, address: str, *, txt: str = "") -> None:
        commands = [f"update add {name}.{ZONE} 300 A {address}"]
        if txt:
            commands.append(f'update add {name}.{ZONE} 300 TXT "{txt}"')
        self.bind.nsupdate(*commands)


@pytest.fixture(params=["fake", "bind"])
def side(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Side]:
    if request.param == "fake":
        yield FakeSide()
        return
    server = Bind(tmp_path / "bind", PORT)
    server.start()
    try:
        yield BindSide(server)
    finally:
        server.stop()


def healthy(proxy: str, address: str, *, zone: str = "a", proxy_set: str = "web") -> Member:
    return Member(proxy, zone=zone, proxy_set=proxy_set, address=address, health=Health.HEALTHY)


def test_contract_a_fleets_names_are_created_and_publishing_again_changes_nothing(
    side: Side,
) -> None:
    publisher = side.publisher()
    fleet = [healthy("web-0", "192.0.2.10"), healthy("web-1", "192.0.2.11", zone="b")]

    outcome = publisher.publish(FLEET, fleet)

    assert outcome.result is DnsResult.PUBLISHED, outcome
    assert (outcome.changes, outcome.records, outcome.conflicts) == (5, 5, ())
    assert side.a("web-0") == ["192.0.2.10"]
    assert side.a("web.set") == ["192.0.2.10", "192.0.2.11"]
    assert side.a("b.zone") == ["192.0.2.11"]
    assert publisher.publish(FLEET, fleet).result is DnsResult.UNCHANGED


def test_contract_a_deleted_proxys_names_are_removed_under_sync(side: Side) -> None:
    publisher = side.publisher()
    old = healthy("old-0", "192.0.2.99", zone="b", proxy_set="")
    publisher.publish(FLEET, [healthy("web-0", "192.0.2.10"), old])

    outcome = publisher.publish(FLEET, [healthy("web-0", "192.0.2.10")])

    assert (outcome.result, outcome.changes, outcome.records) == (DnsResult.PUBLISHED, 2, 3)
    assert (side.a("old-0"), side.a("b.zone"), side.a("a.zone")) == ([], [], ["192.0.2.10"])


def test_contract_upsert_only_leaves_a_deleted_proxys_name(side: Side) -> None:
    publisher = side.publisher(DnsPolicy.UPSERT_ONLY)
    publisher.publish(FLEET, [healthy("web-0", "192.0.2.10"), healthy("web-1", "192.0.2.11")])

    outcome = publisher.publish(FLEET, [healthy("web-0", "192.0.2.10")])

    assert outcome.result is DnsResult.PUBLISHED
    assert (side.a("web-1"), side.a("web.set")) == (["192.0.2.11"], ["192.0.2.10"])


def test_contract_a_name_someone_else_holds_is_left_alone_and_reported(side: Side) -> None:
    side.foreign("web-0", "198.51.100.1")
    side.foreign("web-1", "198.51.100.2", txt="heritage=proxyfleet,fleet=other")

    outcome = side.publisher().publish(
        FLEET, [healthy("web-0", "192.0.2.10"), healthy("web-1", "192.0.2.11")]
    )

    assert outcome.result is DnsResult.PUBLISHED
    assert len(outcome.conflicts) == 2
    assert "web-0 holds A records without this fleet's TXT" in outcome.conflicts[0]
    assert "web-1 belongs to fleet other" in outcome.conflicts[1]
    assert (side.a("web-0"), side.a("web-1")) == (["198.51.100.1"], ["198.51.100.2"])
