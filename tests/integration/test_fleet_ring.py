"""Several fleets spread over several daemons: real processes, real tooz ring and locks.

Each daemon is a process of its own (tests/lockdaemon.py: the real FleetsDaemon, ring,
locks, git sources and fences; in-memory hypervisors, one per fleet, ``kvm-<fleet>``),
serving the same three fleets. Over a real 3-member etcd cluster (each daemon through its
own ``etcd gateway``) and over the file backend on one box. Every mutating call that
passed a fence is logged with its time, box and host, so the tests can say who acted on
which fleet when; /healthz says per fleet who leads.

The ring members are named (``coordination.member``) box-a and box-b, so the spread is
what tooz's own hash ring says for those names: the tests compute it with
``tooz.hashring`` and expect exactly that.
"""

from __future__ import annotations

import time
from pathlib import Path

from daemonutil import wait_until
from etcdcluster import EtcdCluster
from lockprocs import (
    DaemonProc,
    fleet_of,
    fleet_remotes,
    leaders_by_fleet,
    mutations,
    start_daemon,
)
from tooz.hashring import HashRing

FLEETS = ["home", "office", "lab"]
TTL = 6.0
"""Seconds; the TTL of locks and ring membership in these tests (production default 20)."""
POLL = min(max(TTL / 10, 0.2), 2.0)
SLACK = 3.0
"""Seconds for process scheduling and /healthz polling on a busy 2-core machine."""


def ring_says(members: list[str]) -> dict[str, str]:
    """fleet -> member, as tooz's hash ring maps the fleet ids onto ``members``."""
    ring = HashRing([m.encode() for m in members])
    return {f: next(iter(ring.get_nodes(f.encode()))).decode() for f in FLEETS}


def single_leaders(daemons: list[DaemonProc]) -> dict[str, str]:
    """fleet -> its one leader; fleets led by none or by several are left out."""
    return {f: boxes[0] for f, boxes in leaders_by_fleet(daemons).items() if len(boxes) == 1}


def start(
    tmp: Path, box: str, urls: dict[str, str], log: Path, coordination: str, **kw: float
) -> DaemonProc:
    return start_daemon(
        tmp,
        box,
        repo_url="",
        log=log,
        coordination_url=coordination,
        ttl=TTL,
        fleets=urls,
        member=box,
        **kw,
    )


def by_fleet(log: Path) -> dict[str, list[tuple[float, str]]]:
    """fleet -> [(time, box)] of its mutations, in order."""
    found: dict[str, list[tuple[float, str]]] = {}
    for when, box, _, target in mutations(log):
        found.setdefault(fleet_of(target), []).append((when, box))
    return found


def blocks(rows: list[tuple[float, str]]) -> list[str]:
    """The boxes acting on one fleet, one entry per uninterrupted run of the same box."""
    boxes = [box for _, box in rows]
    return [b for i, b in enumerate(boxes) if i == 0 or boxes[i - 1] != b]


def settle(daemons: list[DaemonProc], expected: dict[str, str]) -> None:
    assert wait_until(lambda: single_leaders(daemons) == expected, timeout=90), (
        leaders_by_fleet(daemons),
        [d.output()[-3000:] for d in daemons],
    )


def two_daemons_share_three_fleets_and_a_killed_ones_fleets_move(
    tmp_path: Path, coordination: str
) -> None:
    urls = fleet_remotes(tmp_path, FLEETS, 3)
    log = tmp_path / "mutations.log"
    expected = ring_says(["box-a", "box-b"])
    daemons = [start(tmp_path, b, urls, log, coordination) for b in ("box-a", "box-b")]
    try:
        settle(daemons, expected)
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # and it stays so
            assert all(len(b) == 1 for b in leaders_by_fleet(daemons).values())
            time.sleep(0.2)
        assert wait_until(lambda: set(by_fleet(log)) == set(FLEETS), timeout=30), by_fleet(log)
        for fleet, rows in by_fleet(log).items():
            # The first daemon up may have served a fleet alone until the other joined;
            # after that, only the ring's choice, and never the two mixed.
            other = next(d.box for d in daemons if d.box != expected[fleet])
            assert blocks(rows) in ([expected[fleet]], [other, expected[fleet]]), (fleet, rows)

        # The daemon that owns more fleets dies; everything goes to the survivor.
        owners = list(expected.values())
        victim = max(daemons, key=lambda d: owners.count(d.box))
        (survivor,) = [d for d in daemons if d is not victim]
        moved = sorted(f for f, o in expected.items() if o == victim.box)
        killed = victim.kill()
        assert wait_until(
            lambda: single_leaders([survivor]) == dict.fromkeys(FLEETS, survivor.box),
            timeout=TTL + POLL + SLACK + 10,
        ), survivor.health()
        took = time.time() - killed
        print(f"\nfleets {moved} moved {took:.1f} s after SIGKILL (ttl {TTL:.0f} s)")
        assert took <= TTL + POLL + SLACK
        assert wait_until(
            lambda: all(
                any(box == survivor.box for _, box in by_fleet(log).get(f, [])) for f in moved
            ),
            timeout=30,
        ), by_fleet(log)
        for fleet, rows in by_fleet(log).items():
            assert all(box == survivor.box for when, box in rows if when > killed), (fleet, rows)
    finally:
        for d in daemons:
            d.stop()


def test_over_etcd_two_daemons_share_three_fleets_one_actor_each_and_a_killed_ones_move(
    tmp_path: Path, etcd: EtcdCluster
) -> None:
    two_daemons_share_three_fleets_and_a_killed_ones_fleets_move(tmp_path, etcd.gateway())


def test_on_one_box_the_file_backend_shares_three_fleets_and_a_killed_daemons_move(
    tmp_path: Path,
) -> None:
    two_daemons_share_three_fleets_and_a_killed_ones_fleets_move(
        tmp_path, f"file://{tmp_path / 'locks'}"
    )


def test_over_etcd_a_daemon_joining_takes_its_fleets_over_and_no_fleet_has_two_actors(
    tmp_path: Path, etcd: EtcdCluster
) -> None:
    urls = fleet_remotes(tmp_path, FLEETS, 8)
    log = tmp_path / "mutations.log"
    a = start(tmp_path, "box-a", urls, log, etcd.gateway(), create_seconds=1.0)
    daemons = [a]
    try:
        settle(daemons, dict.fromkeys(FLEETS, "box-a"))
        expected = ring_says(["box-a", "box-b"])
        moving = sorted(f for f, o in expected.items() if o == "box-b")
        assert moving, "the ring gives box-b nothing: pick other fleet ids"
        # box-b joins while box-a is busy creating (8 proxies per fleet, 1 s per create).
        assert wait_until(lambda: len(mutations(log)) >= 3, timeout=30)
        b = start(tmp_path, "box-b", urls, log, etcd.gateway(), create_seconds=1.0)
        daemons = [b, a]  # sampled newest first: a fleet moves from a to b, and b can only
        # say it leads once a has released the lock, which a does after it stopped saying so
        samples = 0
        joined = time.time()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            now = leaders_by_fleet(daemons)
            samples += 1
            assert all(len(boxes) <= 1 for boxes in now.values()), now
            if {f: boxes[0] for f, boxes in now.items() if boxes} == expected:
                break
            time.sleep(0.1)
        else:
            raise AssertionError((leaders_by_fleet(daemons), b.output()[-3000:]))
        print(f"\nrebalanced {moving} to box-b {time.time() - joined:.1f} s after it started; "
              f"{samples} samples, never two leaders")  # fmt: skip
        for _ in range(20):  # and it stays so
            now = leaders_by_fleet(daemons)
            assert all(len(boxes) == 1 for boxes in now.values()), now
            time.sleep(0.2)

        assert wait_until(
            lambda: all(any(box == "box-b" for _, box in by_fleet(log).get(f, [])) for f in moving),
            timeout=60,
        ), by_fleet(log)
        time.sleep(2)
        for fleet, rows in by_fleet(log).items():
            # One actor at a time: box-a's calls, then (for a moved fleet) box-b's, never mixed.
            assert blocks(rows) == (["box-a", "box-b"] if fleet in moving else ["box-a"]), (
                fleet,
                rows,
            )
        assert "handing it over" in a.output()
    finally:
        for d in daemons:
            d.stop()
