"""The lock contract of tests/test_lock_contract.py once more, over a real etcd cluster.

``FakeLocks`` stands in for the daemon's lock whatever its backend; the cases that hold
for it and for the file lock are collected here again, with two ``ToozLocks`` over a
3-member etcd cluster behind a gateway (the backend of a fleet run from several boxes).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from etcdcluster import EtcdCluster
from test_lock_contract import (  # noqa: F401  (the contract's cases, collected here over etcd)
    A,
    B,
    test_contract_a_released_lock_goes_to_the_next_and_each_take_is_a_new_epoch,
    test_contract_a_second_holder_is_refused_and_told_who_holds_the_lock,
    test_contract_closing_a_service_releases_every_lock_it_holds,
    test_contract_nobody_holds_a_lock_never_taken_and_releasing_it_is_fine,
    test_contract_the_same_fleet_is_the_same_lock_and_taking_it_again_is_no_new_epoch,
)

from reconciler.adapters.coordination.toozlock import ToozLocks
from reconciler.ports.locks import LockService


@pytest.fixture
def pair(etcd: EtcdCluster) -> Iterator[tuple[LockService, ...]]:
    """Two processes' lock services over one etcd cluster."""
    url = etcd.gateway()
    services: tuple[LockService, ...] = (ToozLocks(url, me=A), ToozLocks(url, me=B))
    try:
        yield services
    finally:
        for service in services:
            service.close()
