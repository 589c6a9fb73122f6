"""Leadership with a fleet ring (FakeRing, FakeLocks): only the assigned daemon takes a
fleet's lock, and a fleet assigned elsewhere is handed over once no call is in flight."""

from __future__ import annotations

import threading

import pytest

from reconciler.adapters.coordination.fakelock import FakeLockBackend, FakeLocks
from reconciler.adapters.coordination.fakering import FakeRing, FakeRingBackend
from reconciler.engine.leadership import Leadership
from reconciler.errors import FencedError
from reconciler.model.coordination import Holder

A = Holder("box-a", 101, "daemon")
B = Holder("box-b", 202, "daemon")


def pair(owner: str) -> tuple[FakeLockBackend, FakeRing, FakeRing, Leadership, Leadership]:
    backend, service = FakeLockBackend(), FakeRingBackend()
    ring_a = FakeRing("box-a", {"home": owner}, backend=service)
    ring_b = FakeRing("box-b", {"home": owner}, backend=service)
    for ring in (ring_a, ring_b):
        ring.refresh()
    a = Leadership(FakeLocks(backend, A), poll=0.01, fleet="home", ring=ring_a, drain=5)
    b = Leadership(FakeLocks(backend, B), poll=0.01, fleet="home", ring=ring_b, drain=5)
    return backend, ring_a, ring_b, a, b


def move(owner: str, *rings: FakeRing) -> None:
    for ring in rings:
        ring.owners["home"] = owner
        ring.refresh()


def test_a_daemon_the_ring_does_not_name_leaves_a_free_lock_alone() -> None:
    backend, _, _, a, b = pair("box-b")

    assert a.check() is False
    assert a.claim("home") is False
    assert backend.owners == {}
    assert a.describe().startswith("standby for fleet home, assigned to box-b (ring of 2)")

    assert b.check() is True
    assert b.leading and b.claim("home") and b.held()  # the run its takeover asks for


def test_a_fleet_assigned_elsewhere_is_released_and_the_new_owner_takes_it() -> None:
    backend, ring_a, ring_b, a, b = pair("box-a")
    assert a.check() and a.claim("home") and a.held()

    move("box-b", ring_a, ring_b)
    assert b.check() is False  # not yet: box-a still holds the lock
    assert a.check() is False

    assert not a.leading and not a.held()
    assert "home" not in backend.owners or backend.owners["home"][1].box == "box-b"
    assert b.check() is True
    assert [event for event, _, _ in backend.log] == ["acquired", "released", "acquired"]


def test_the_hand_over_waits_for_the_call_in_flight_and_refuses_the_next_one() -> None:
    backend, ring_a, ring_b, a, _ = pair("box-a")
    assert a.claim("home")
    in_call, finish = threading.Event(), threading.Event()

    def create() -> None:
        with a.fence.passing("kvm01", "create"):
            in_call.set()
            finish.wait(5)

    call = threading.Thread(target=create)
    call.start()
    assert in_call.wait(5)
    move("box-b", ring_a, ring_b)
    handing = threading.Thread(target=a.check)
    handing.start()
    handing.join(0.3)

    assert handing.is_alive(), "the lock went while a create was in flight"
    assert backend.owners["home"][1].box == "box-a"
    assert not a.leading  # it no longer says it leads, though it still holds the lock
    with pytest.raises(FencedError), a.fence.passing("kvm01", "delete"):
        pass

    finish.set()
    call.join(5)
    handing.join(5)
    assert "home" not in backend.owners


def test_a_fleet_that_comes_back_is_taken_again_with_the_fence_open() -> None:
    _, ring_a, ring_b, a, _ = pair("box-a")
    assert a.claim("home")
    move("box-b", ring_a, ring_b)
    a.check()
    assert not a.held()

    move("box-a", ring_a, ring_b)
    assert a.check() is True
    assert a.claim("home") and a.held()
