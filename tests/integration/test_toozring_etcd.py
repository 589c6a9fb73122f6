"""The fleet ring over a real etcd cluster when members come and go while a ring is built.

tooz's Partitioner reads the group's members for its ring, then its watchers take a
snapshot of their own; a member that joins or leaves between the two reads is in one and
not the other, so no watcher ever reports it. A test run of test_fleet_ring.py on a busy
machine hit that window: each of two daemons had a ring of itself alone for 85 s, both
owning every fleet (the fleet lock kept one actor). Here the window is hit on purpose: the
other daemon joins (or leaves) from inside box-a's call that takes the watchers' snapshot.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from etcdcluster import EtcdCluster
from tooz import coordination

from reconciler.adapters.coordination.fleetlock import this_process
from reconciler.adapters.coordination.toozring import ToozRing

TTL = 6.0
FLEET = "home"


def ring(url: str, member: str) -> ToozRing:
    return ToozRing(url, member=member, fleets=[FLEET], me=this_process("daemon"), ttl=TTL)


@pytest.fixture
def url(etcd: EtcdCluster) -> str:
    return etcd.gateway()


@pytest.fixture
def rings(url: str) -> Iterator[tuple[ToozRing, ToozRing]]:
    a, b = ring(url, "box-a"), ring(url, "box-b")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


class Read:
    """A read already made: what a tooz future gives when it is done."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self, timeout: float | None = None) -> Any:
        return self.value


def in_box_a_window(monkeypatch: pytest.MonkeyPatch, act: Callable[[], None]) -> list[int]:
    """Make ``act`` run once inside box-a's first ``watch_join_group``: after its
    Partitioner read the members and their capabilities, before its watchers' snapshot.
    (The etcd driver reads capabilities when they are asked for, after the snapshot; a
    driver that reads them when the request is made leaves the window open for a leave
    too: box-a's reads are made so here.) Returns a list that holds 1 once it ran."""
    real = coordination.get_coordinator
    ran: list[int] = []

    def get_coordinator(url: str, member_id: bytes, *args: Any, **kw: Any) -> Any:
        coord = real(url, member_id, *args, **kw)
        if member_id == b"box-a":
            watch = coord.watch_join_group
            capabilities = coord.get_member_capabilities

            def get_member_capabilities(group: bytes, member: bytes) -> Read:
                return Read(capabilities(group, member).get())

            coord.get_member_capabilities = get_member_capabilities

            def watch_join_group(group: bytes, callback: Any) -> None:
                if not ran:
                    ran.append(1)
                    act()
                watch(group, callback)

            coord.watch_join_group = watch_join_group
        return coord

    monkeypatch.setattr(coordination, "get_coordinator", get_coordinator)
    return ran


def test_a_member_that_joins_while_a_ring_is_built_is_in_that_ring_after_its_next_refresh(
    rings: tuple[ToozRing, ToozRing], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = rings
    ran = in_box_a_window(monkeypatch, b.refresh)

    a.refresh()
    assert ran == [1]
    assert b.members(FLEET) == ("box-a", "box-b")  # b joined after a: it saw a

    for _ in range(2):
        a.refresh()
        b.refresh()
    assert a.members(FLEET) == b.members(FLEET) == ("box-a", "box-b")
    assert a.owner(FLEET) == b.owner(FLEET) is not None


def test_a_member_that_leaves_while_a_ring_is_built_is_gone_from_it_after_its_next_refresh(
    rings: tuple[ToozRing, ToozRing], monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = rings
    b.refresh()
    ran = in_box_a_window(monkeypatch, b.close)

    a.refresh()
    assert ran == [1]

    a.refresh()
    assert a.members(FLEET) == ("box-a",)
    assert a.owner(FLEET) == "box-a"  # not box-b, gone: a fleet nobody acts on
