"""One contract, two lock services: the same cases against ``FakeLocks`` and ``ToozLocks``.

``FakeLocks`` stands in for the tooz lock in the daemon's and apply's unit tests, so what
it grants and refuses must be what tooz does. Each case runs against both: two fake
services over one ``FakeLockBackend``, and two ``ToozLocks`` over the default backend (a
file lock in a temporary state dir: real tooz, real flock), as two processes would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.coordination.fakelock import FakeLockBackend, FakeLocks
from reconciler.adapters.coordination.toozlock import ToozLocks, default_url
from reconciler.model.coordination import Holder
from reconciler.ports.locks import LockService

A = Holder("box-a", 101, "daemon")
B = Holder("box-b", 202, "apply")


@pytest.fixture(params=["fake", "file"])
def pair(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[LockService, ...]]:
    """Two processes' lock services over one coordination service."""
    services: tuple[LockService, ...]
    if request.param == "fake":
        backend = FakeLockBackend()
        services = (FakeLocks(backend, A), FakeLocks(backend, B))
    else:
        url = default_url(tmp_path)
        services = (ToozLocks(url, me=A), ToozLocks(url, me=B))
    try:
        yield services
    finally:
        for service in services:
            service.close()


def test_contract_a_second_holder_is_refused_and_told_who_holds_the_lock(
    pair: tuple[LockService, LockService],
) -> None:
    first, second = pair

    assert first.lock("home").acquire()
    assert second.lock("home").acquire() is False

    holder = second.lock("home").holder()
    assert holder is not None
    assert (holder.box, holder.pid, holder.role) == ("box-a", 101, "daemon")
    assert holder.since is not None
    assert str(holder).startswith("daemon on box-a (pid 101, since ")
    assert first.lock("home").held() and not second.lock("home").held()
    assert second.lock("office").acquire()  # another fleet, another lock


def test_contract_nobody_holds_a_lock_never_taken_and_releasing_it_is_fine(
    pair: tuple[LockService, LockService],
) -> None:
    first, _ = pair
    lock = first.lock("home")

    lock.release()

    assert lock.holder() is None
    assert (lock.held(), lock.epoch) == (False, 0)


def test_contract_the_same_fleet_is_the_same_lock_and_taking_it_again_is_no_new_epoch(
    pair: tuple[LockService, LockService],
) -> None:
    first, _ = pair
    lock = first.lock("home")

    assert lock.acquire() and lock.acquire()

    assert first.lock("home") is lock
    assert lock.epoch == 1


def test_contract_a_released_lock_goes_to_the_next_and_each_take_is_a_new_epoch(
    pair: tuple[LockService, LockService],
) -> None:
    first, second = pair
    mine, theirs = first.lock("home"), second.lock("home")
    assert mine.acquire()

    mine.release()
    assert not mine.held()
    assert theirs.acquire()
    theirs.release()

    assert mine.acquire()
    assert (mine.epoch, theirs.epoch) == (2, 1)


def test_contract_closing_a_service_releases_every_lock_it_holds(
    pair: tuple[LockService, LockService],
) -> None:
    first, second = pair
    assert first.lock("home").acquire() and first.lock("office").acquire()

    first.close()

    assert second.lock("home").acquire() and second.lock("office").acquire()
