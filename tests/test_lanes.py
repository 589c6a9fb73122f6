"""Which lane a thread's libvirt calls take (reconciler.adapters.hypervisor.transport.lanes)."""

from __future__ import annotations

import threading

from reconciler.adapters.hypervisor.transport.lanes import CALLS_PER_LANE, Lane, Lanes


def hold_at_once(lanes: Lanes, count: int) -> list[Lane]:
    """``count`` threads inside ``held`` at the same time; the lanes they got."""
    got: list[Lane] = []
    inside = threading.Barrier(count + 1)
    leave = threading.Event()
    lock = threading.Lock()

    def hold() -> None:
        with lanes.held() as lane:
            with lock:
                got.append(lane)
            inside.wait(timeout=10)
            leave.wait(timeout=10)

    threads = [threading.Thread(target=hold) for _ in range(count)]
    for thread in threads:
        thread.start()
    inside.wait(timeout=10)
    leave.set()
    for thread in threads:
        thread.join(timeout=10)
    return got


def test_a_thread_outside_a_lane_has_none() -> None:
    assert Lanes().current() is None


def test_up_to_five_threads_share_a_lane_and_the_sixth_opens_another() -> None:
    lanes = Lanes()

    five = hold_at_once(lanes, CALLS_PER_LANE)
    six = hold_at_once(Lanes(), CALLS_PER_LANE + 1)

    assert len({id(lane) for lane in five}) == 1
    assert sorted(sum(1 for g in six if g is lane) for lane in set(six)) == [1, 5]


def test_ten_threads_at_once_take_two_lanes_of_five() -> None:
    got = hold_at_once(Lanes(), 2 * CALLS_PER_LANE)

    assert sorted(sum(1 for g in got if g is lane) for lane in set(got)) == [5, 5]


def test_a_lane_left_is_reused_and_its_users_counted_down() -> None:
    lanes = Lanes()
    with lanes.held() as first:
        assert first.users == 1
        assert lanes.current() is first
    with lanes.held() as second:
        assert second is first
    assert first.users == 0
    assert lanes.current() is None


def test_a_nested_lane_is_the_outer_one() -> None:
    lanes = Lanes()
    with lanes.held() as outer, lanes.held() as inner:
        assert inner is outer
        assert outer.users == 1
    assert lanes.current() is None


def test_forgetting_drops_every_connection_and_ownership() -> None:
    lanes = Lanes()
    conn = object()
    with lanes.held() as lane:
        lane.conn = conn
        assert lanes.owns(conn)
        assert lanes.dialled() == 1
        lanes.forget()
        assert lane.conn is None
    assert not lanes.owns(conn)
    assert not lanes.owns(None)
    assert lanes.dialled() == 0
