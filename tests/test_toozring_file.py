"""The fleet ring over tooz's partitioned groups on the file backend (real tooz, one box)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tooz.hashring import HashRing

from reconciler.adapters.coordination.fleetlock import this_process
from reconciler.adapters.coordination.toozlock import default_url
from reconciler.adapters.coordination.toozring import ToozRing, ring_url
from reconciler.errors import CoordinationError

FLEETS = ("home", "office", "lab", "edge")
TTL = 3.0

HOLD = """
import sys, time
from reconciler.adapters.coordination.fleetlock import this_process
from reconciler.adapters.coordination.toozring import ToozRing
ring = ToozRing(sys.argv[1], member="box-a", fleets=["home"], me=this_process("daemon"), ttl=3)
ring.refresh()
print("joined", flush=True)
while True:
    time.sleep(0.5)
    ring.refresh()
"""


def ring(tmp: Path, member: str) -> ToozRing:
    return ToozRing(
        default_url(tmp), member=member, fleets=FLEETS, me=this_process("daemon"), ttl=TTL
    )


@pytest.fixture
def rings(tmp_path: Path) -> Iterator[tuple[ToozRing, ToozRing]]:
    a, b = ring(tmp_path, "box-a"), ring(tmp_path, "box-b")
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def owners(r: ToozRing) -> dict[str, str | None]:
    return {f: r.owner(f) for f in FLEETS}


def refresh(*rings: ToozRing, times: int = 2) -> None:
    for _ in range(times):  # the second read reports the joins the first one made
        for r in rings:
            r.refresh()


def test_the_file_driver_forgets_a_silent_member_after_the_ttl() -> None:
    assert ring_url("file:///var/lib/proxyfleet/locks", 20) == (
        "file:///var/lib/proxyfleet/locks?timeout=20&executor=synchronous"
    )


def test_two_daemons_see_the_same_owner_for_every_fleet_as_toozs_hash_ring_says(
    rings: tuple[ToozRing, ToozRing],
) -> None:
    a, b = rings
    refresh(a, b)

    expected = HashRing([b"box-a", b"box-b"])
    assert (
        owners(a)
        == owners(b)
        == {f: next(iter(expected.get_nodes(f.encode()))).decode() for f in FLEETS}
    )
    assert a.members("home") == b.members("home") == ("box-a", "box-b")


def test_a_daemon_that_leaves_hands_every_fleet_to_the_other(
    rings: tuple[ToozRing, ToozRing],
) -> None:
    a, b = rings
    refresh(a, b)

    b.close()
    a.refresh()

    assert owners(a) == dict.fromkeys(FLEETS, "box-a")
    assert a.members("lab") == ("box-a",)


def test_a_daemon_that_stops_renewing_drops_out_after_the_ttl_and_comes_back(
    rings: tuple[ToozRing, ToozRing],
) -> None:
    a, b = rings
    refresh(a, b)
    deadline = time.monotonic() + TTL + 2
    while time.monotonic() < deadline and a.members("home") != ("box-a",):
        time.sleep(0.3)
        a.refresh()  # b is silent: a hung or dead daemon

    assert owners(a) == dict.fromkeys(FLEETS, "box-a")

    refresh(b, a)  # b wakes up: its membership lapsed, it joins again
    assert owners(a) == owners(b)
    assert a.members("home") == ("box-a", "box-b")


def test_before_the_first_refresh_the_ring_gives_nothing_to_anybody(tmp_path: Path) -> None:
    r = ring(tmp_path, "box-a")
    try:
        assert owners(r) == dict.fromkeys(FLEETS)
        assert r.members("home") == ()
    finally:
        r.close()


def test_a_member_name_in_use_by_a_live_process_of_this_box_is_refused(tmp_path: Path) -> None:
    url = default_url(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, url],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent.parent)},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "joined"
        twin = ToozRing(url, member="box-a", fleets=["home"], me=this_process("daemon"), ttl=TTL)
        with pytest.raises(CoordinationError, match=r"'box-a' is in use by pid \d+ on this box"):
            twin.refresh()
        twin.close()
    finally:
        holder.kill()
        holder.wait()


def test_a_failed_read_keeps_the_view_and_the_membership_and_the_next_read_recovers(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="reconciler.adapters.coordination.toozring")
    a = ring(tmp_path, "box-a")
    try:
        refresh(a)
        groups, hidden = tmp_path / "locks" / "groups", tmp_path / "locks" / "hidden"
        groups.rename(hidden)  # the service does not answer as it should

        with pytest.raises(CoordinationError, match="reading the fleet ring"):
            a.refresh()
        assert owners(a) == dict.fromkeys(FLEETS, "box-a")  # the last view stays

        hidden.rename(groups)
        a.refresh()
        assert owners(a) == dict.fromkeys(FLEETS, "box-a")
        joins = [r for r in caplog.records if r.getMessage().startswith("Joined the ring")]
        assert len(joins) == len(FLEETS), "a failed read made the daemon leave and join again"
    finally:
        a.close()
