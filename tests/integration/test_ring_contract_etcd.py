"""The ring contract of tests/test_ring_contract.py once more, over a real etcd cluster.

``FakeRing`` stands in for the daemon's ring whatever its backend; the cases that hold
for it and for the file backend are collected here again, with ``ToozRing``s over a
3-member etcd cluster behind a gateway (the backend of fleets spread over several boxes),
and one case more that needs a service that can go away: the gateway is killed.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from etcdcluster import EtcdCluster
from test_ring_contract import (  # noqa: F401  (the contract's cases, collected here over etcd)
    FLEETS,
    MakeRing,
    refresh,
    test_contract_a_daemon_that_closes_drops_out_of_the_others_ring_at_their_next_refresh,
    test_contract_a_daemon_that_joins_late_is_in_everyone_s_ring_after_their_refresh,
    test_contract_a_lone_daemon_is_the_only_member_and_owns_every_fleet_it_lists,
    test_contract_a_ring_answers_nobody_and_no_members_before_its_first_refresh,
    test_contract_a_ring_owner_is_one_of_its_members_and_every_daemon_sees_the_same,
    test_contract_only_the_daemons_that_list_a_fleet_are_its_candidates,
    tooz_rings,
)

from reconciler.adapters.coordination.fakering import FakeRing
from reconciler.errors import CoordinationError
from reconciler.ports.ring import FleetRing


@pytest.fixture
def make_ring(etcd: EtcdCluster) -> Iterator[MakeRing]:
    """Builds daemons' rings over one etcd cluster."""
    yield from tooz_rings(etcd.gateway())


def cut_off(ring: FleetRing, etcd: EtcdCluster) -> None:
    """The coordination service goes out of ``ring``'s reach."""
    if isinstance(ring, FakeRing):
        ring.down = True
        return
    for gateway in etcd.gateways:
        gateway.kill()
        gateway.wait(10)


@pytest.mark.parametrize("kind", ["fake", "etcd"])
def test_contract_a_ring_that_cannot_reach_its_service_raises_and_keeps_its_last_view(
    kind: str, make_ring: MakeRing, etcd: EtcdCluster
) -> None:
    ring = FakeRing("box-a", fleets=FLEETS) if kind == "fake" else make_ring("box-a", FLEETS)
    refresh(ring)

    cut_off(ring, etcd)
    with pytest.raises(CoordinationError):
        ring.refresh()

    assert {f: (ring.owner(f), ring.members(f)) for f in FLEETS} == dict.fromkeys(
        FLEETS, ("box-a", ("box-a",))
    )
