"""Leadership over the fake lock service: one leader per fleet, takeover, standby text."""

from __future__ import annotations

from reconciler.adapters.coordination.fakelock import FakeLockBackend, FakeLocks
from reconciler.engine.leadership import Leadership
from reconciler.model.coordination import Holder

A = Holder("box-a", 101, "daemon")
B = Holder("box-b", 202, "daemon")


def pair() -> tuple[FakeLockBackend, Leadership, Leadership, list[tuple[str, str, bool]]]:
    backend = FakeLockBackend()
    changes: list[tuple[str, str, bool]] = []
    a = Leadership(
        FakeLocks(backend, A), poll=0.01, on_change=lambda f, on: changes.append(("a", f, on))
    )
    b = Leadership(
        FakeLocks(backend, B), poll=0.01, on_change=lambda f, on: changes.append(("b", f, on))
    )
    return backend, a, b, changes


def test_the_first_daemon_to_claim_a_fleet_leads_and_the_second_stands_by_naming_it() -> None:
    _, a, b, changes = pair()

    assert a.claim("home") is True
    assert b.claim("home") is False

    assert a.held() and not b.held()
    assert a.describe() == "leader of fleet home"
    assert b.describe().startswith("standby for fleet home, led by daemon on box-a (pid 101")
    assert changes == [("a", "home", True), ("b", "home", False)]


def test_a_leader_that_loses_its_lock_notices_and_the_standby_takes_over() -> None:
    backend, a, b, changes = pair()
    a.claim("home")
    b.claim("home")

    backend.lose("home")

    assert not a.held()
    assert a.check() is False
    assert not a.leading
    assert b.check() is True
    assert b.leading
    assert b.claim("home") and b.held()  # the run its takeover asks for
    assert changes[-2:] == [("a", "home", False), ("b", "home", True)]
    assert a.check() is False  # the new leader keeps it


def test_closing_the_leader_hands_the_fleet_to_the_standby_at_its_next_check() -> None:
    _, a, b, _ = pair()
    a.claim("home")
    b.claim("home")

    a.close()

    assert b.check() is True
    assert a.claim("home") is False


def test_an_unreachable_coordination_service_means_standby_with_the_reason_shown() -> None:
    backend, a, _, _ = pair()
    backend.down = True

    assert a.claim("home") is False
    assert not a.held()
    assert "fake coordination service is down" in a.describe()
    backend.down = False
    assert a.check() is True
    assert a.describe() == "leader of fleet home"


def test_a_renamed_fleet_releases_the_old_lock_and_claims_the_new_one() -> None:
    backend, a, b, _ = pair()
    a.claim("home")

    assert a.claim("office") is True

    assert set(backend.owners) == {"office"}
    assert b.claim("home") is True


def test_a_lock_lost_and_taken_back_mid_cycle_keeps_the_fence_closed_until_the_next_claim() -> None:
    backend, a, _, _ = pair()
    assert a.claim("home") and a.held()

    backend.lose("home")
    a.check()  # notices the loss
    assert a.check() is True  # and takes the lock back: a new epoch

    assert a.leading
    assert not a.held()  # the cycle that planned under the old epoch may not act
    assert a.claim("home") and a.held()  # the next cycle plans anew and may
