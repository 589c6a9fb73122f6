"""Active/standby over a real 3-member etcd cluster on 127.0.0.1 (Debian's etcd-server).

Each daemon is a process of its own (tests/lockdaemon.py: the real daemon, lock, git
source and fence; in-memory hypervisors) that reaches etcd through its own ``etcd
gateway`` over all three members, as docs/operations.md recommends. Mutating calls that
passed a fence are logged with their time, so the tests can say who acted when.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

from daemonutil import wait_until
from etcdcluster import EtcdCluster
from lockprocs import DaemonProc, fleet_files, fleet_remote, mutations, start_daemon

TTL = 6.0
"""Seconds; the lock's TTL in these tests (production default 20)."""
POLL = min(max(TTL / 10, 0.2), 2.0)
FENCE = TTL * 2 / 3
"""A leader counts its lock as lost this long after its last renewal."""
SLACK = 2.0
"""Seconds for process scheduling and /healthz polling on a busy 2-core machine."""


def leaders(daemons: list[DaemonProc]) -> list[DaemonProc]:
    return [d for d in daemons if d.alive() and d.leads()]


def start_pair(
    tmp_path: Path, etcd: EtcdCluster, remote_url: str, log: Path, *, n: int = 2
) -> list[DaemonProc]:
    daemons = [
        start_daemon(
            tmp_path,
            f"box-{chr(ord('a') + i)}",
            repo_url=remote_url,
            log=log,
            coordination_url=etcd.gateway(),
            ttl=TTL,
            create_seconds=0.5,
        )
        for i in range(n)
    ]
    assert wait_until(lambda: len(leaders(daemons)) == 1, timeout=60), [
        d.output()[-3000:] for d in daemons
    ]
    assert wait_until(lambda: sum(d.stands_by() for d in daemons) == n - 1, timeout=30), [
        d.health() for d in daemons
    ]
    return daemons


def test_a_sigkilled_leader_is_replaced_within_the_ttl_and_the_new_one_finishes_the_fleet(
    tmp_path: Path, etcd: EtcdCluster
) -> None:
    remote = fleet_remote(tmp_path, 6)
    log = tmp_path / "mutations.log"
    daemons = start_pair(tmp_path, etcd, remote.url, log)
    try:
        (leader,) = leaders(daemons)
        (standby,) = [d for d in daemons if d is not leader]
        assert wait_until(
            lambda: any(m[1] == leader.box and m[2] == "create" for m in mutations(log)),
            timeout=30,
        )
        killed = leader.kill()
        assert wait_until(standby.leads, timeout=TTL + POLL + SLACK + 10)
        took_over = time.time()
        takeover = took_over - killed
        print(f"\ntakeover after SIGKILL: {takeover:.1f} s (ttl {TTL:.0f} s)")
        assert takeover <= TTL + POLL + SLACK

        assert wait_until(
            lambda: (
                {m[3] for m in mutations(log) if m[1] == standby.box and m[2] == "create"}.__len__()
                == 6
            ),
            timeout=60,
        ), mutations(log)
        after = [m for m in mutations(log) if m[0] > killed]
        assert after and {m[1] for m in after} == {standby.box}
        assert "standby for fleet home" not in standby.health()
    finally:
        for d in daemons:
            d.stop()


def test_one_etcd_member_killed_even_the_raft_leader_changes_nothing(
    tmp_path: Path, etcd: EtcdCluster
) -> None:
    remote = fleet_remote(tmp_path, 1)
    log = tmp_path / "mutations.log"
    daemons = start_pair(tmp_path, etcd, remote.url, log)
    try:
        (leader,) = leaders(daemons)
        (standby,) = [d for d in daemons if d is not leader]
        assert wait_until(lambda: len(mutations(log)) >= 2, timeout=30)

        etcd.kill(etcd.raft_leader())  # an election, and a dead endpoint behind the gateways
        deadline = time.monotonic() + 2 * TTL
        while time.monotonic() < deadline:
            assert leader.leads(), leader.health()
            assert standby.stands_by(), standby.health()
            time.sleep(0.3)

        # And the leader still acts: a new proxy is created by it, by nobody else.
        remote.commit(fleet_files(2), "one more proxy")
        leader.signal(signal.SIGHUP)
        assert wait_until(
            lambda: any(m[3].startswith("pf-home-web-2-") for m in mutations(log)), timeout=30
        ), leader.output()[-3000:]
        assert {m[1] for m in mutations(log)} == {leader.box}
        assert "Lost the lock" not in leader.output()
    finally:
        for d in daemons:
            d.stop()


def test_without_quorum_nobody_acts_and_with_quorum_back_exactly_one_leads_again(
    tmp_path: Path, etcd: EtcdCluster
) -> None:
    remote = fleet_remote(tmp_path, 12)
    log = tmp_path / "mutations.log"
    daemons = start_pair(tmp_path, etcd, remote.url, log, n=3)
    try:
        (leader,) = leaders(daemons)
        assert wait_until(lambda: any(m[2] == "create" for m in mutations(log)), timeout=30)
        lost = time.time()
        etcd.kill(etcd.members[0])
        etcd.kill(etcd.members[1])

        # Every daemon stops acting: none reports leading once the fence has closed.
        assert wait_until(lambda: not leaders(daemons), timeout=FENCE + POLL + SLACK + 5)
        print(f"\nleader stood down {time.time() - lost:.1f} s after quorum was lost")
        for d in daemons:
            d.signal(signal.SIGHUP)  # ask for runs: without the lock they must do nothing
        quiet_from = lost + FENCE + 0.5  # a create that passed the fence just before it
        time.sleep(TTL)
        assert not leaders(daemons)
        back = time.time()
        assert [m for m in mutations(log) if quiet_from < m[0] < back] == []

        etcd.start_member(etcd.members[0])
        etcd.start_member(etcd.members[1])
        assert etcd.wait_healthy(30), etcd.logs()
        assert wait_until(lambda: len(leaders(daemons)) == 1, timeout=3 * TTL + SLACK)
        print(f"one leader again {time.time() - back:.1f} s after quorum came back")
        deadline = time.monotonic() + TTL
        while time.monotonic() < deadline:
            assert len(leaders(daemons)) == 1
            time.sleep(0.5)

        # Nobody acted at the same time as another: the log is the first leader's block,
        # then (if the lock moved) the new leader's, never interleaved.
        boxes = [m[1] for m in mutations(log)]
        blocks = [b for i, b in enumerate(boxes) if i == 0 or boxes[i - 1] != b]
        assert blocks[0] == leader.box and len(blocks) <= 2, blocks
    finally:
        for d in daemons:
            d.stop()
