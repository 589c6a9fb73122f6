"""One contract, two fleet rings: the same cases against ``FakeRing`` and ``ToozRing``.

``FakeRing`` stands in for the tooz ring in the daemon's unit tests, so what it answers
before, between and after refreshes must be what tooz's partitioned groups answer. Each
case runs against both: fake rings over one ``FakeRingBackend``, and ``ToozRing``s over
the file backend in a temporary state dir (real tooz, one box), as two daemons would.
tests/integration/test_ring_contract_etcd.py collects the same cases over a real etcd.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from reconciler.adapters.coordination.fakering import FakeRing, FakeRingBackend
from reconciler.adapters.coordination.fleetlock import this_process
from reconciler.adapters.coordination.toozlock import default_url
from reconciler.adapters.coordination.toozring import ToozRing
from reconciler.ports.ring import FleetRing

FLEETS = ("home", "office", "lab", "edge")
TTL = 6.0

MakeRing = Callable[[str, Sequence[str]], FleetRing]


def tooz_rings(url: str) -> Iterator[MakeRing]:
    """A maker of ``ToozRing``s over ``url``, each closed afterwards."""
    made: list[FleetRing] = []

    def make(member: str, fleets: Sequence[str]) -> FleetRing:
        ring = ToozRing(url, member=member, fleets=fleets, me=this_process("daemon"), ttl=TTL)
        made.append(ring)
        return ring

    try:
        yield make
    finally:
        for ring in made:
            ring.close()


@pytest.fixture(params=["fake", "file"])
def make_ring(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeRing]:
    """Builds daemons' rings over one coordination service: ``make_ring(member, fleets)``."""
    if request.param == "file":
        yield from tooz_rings(default_url(tmp_path))
        return
    backend = FakeRingBackend()
    yield lambda member, fleets: FakeRing(member, fleets=fleets, backend=backend)


def refresh(*rings: FleetRing, times: int = 2) -> None:
    for _ in range(times):  # the second read reports the joins the first one made
        for ring in rings:
            ring.refresh()


def test_contract_a_ring_answers_nobody_and_no_members_before_its_first_refresh(
    make_ring: MakeRing,
) -> None:
    ring = make_ring("box-a", FLEETS)

    assert ring.member == "box-a"
    assert [(ring.owner(f), ring.members(f)) for f in FLEETS] == [(None, ())] * len(FLEETS)


def test_contract_a_lone_daemon_is_the_only_member_and_owns_every_fleet_it_lists(
    make_ring: MakeRing,
) -> None:
    ring = make_ring("box-a", FLEETS)

    ring.refresh()

    assert {f: (ring.owner(f), ring.members(f)) for f in FLEETS} == dict.fromkeys(
        FLEETS, ("box-a", ("box-a",))
    )


def test_contract_a_ring_owner_is_one_of_its_members_and_every_daemon_sees_the_same(
    make_ring: MakeRing,
) -> None:
    a, b, c = (make_ring(name, FLEETS) for name in ("box-a", "box-b", "box-c"))

    refresh(a, b, c)

    for fleet in FLEETS:
        assert a.members(fleet) == b.members(fleet) == c.members(fleet)
        assert a.members(fleet) == ("box-a", "box-b", "box-c")
        assert a.owner(fleet) == b.owner(fleet) == c.owner(fleet)
        assert a.owner(fleet) in a.members(fleet)


def test_contract_only_the_daemons_that_list_a_fleet_are_its_candidates(
    make_ring: MakeRing,
) -> None:
    a, b = make_ring("box-a", ("home", "lab")), make_ring("box-b", ("home",))

    refresh(a, b)

    assert (a.owner("lab"), a.members("lab")) == ("box-a", ("box-a",))
    assert a.members("home") == b.members("home") == ("box-a", "box-b")
    assert (b.owner("lab"), b.members("lab")) == (None, ())  # not listed: not in its view


def test_contract_a_daemon_that_closes_drops_out_of_the_others_ring_at_their_next_refresh(
    make_ring: MakeRing,
) -> None:
    a, b = make_ring("box-a", FLEETS), make_ring("box-b", FLEETS)
    refresh(a, b)
    assert a.members("home") == ("box-a", "box-b")

    b.close()
    refresh(a)

    assert {f: (a.owner(f), a.members(f)) for f in FLEETS} == dict.fromkeys(
        FLEETS, ("box-a", ("box-a",))
    )


def test_contract_a_daemon_that_joins_late_is_in_everyone_s_ring_after_their_refresh(
    make_ring: MakeRing,
) -> None:
    a = make_ring("box-a", FLEETS)
    refresh(a)
    b = make_ring("box-b", FLEETS)

    refresh(b, a)

    assert [a.members(f) for f in FLEETS] == [("box-a", "box-b")] * len(FLEETS)
    assert [a.owner(f) for f in FLEETS] == [b.owner(f) for f in FLEETS]
