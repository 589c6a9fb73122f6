"""The tooz lock on its default backend, a file lock in the state dir (real tooz, real flock)."""

from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from reconciler.adapters.coordination.fleetlock import this_process
from reconciler.adapters.coordination.toozlock import ToozLocks, default_url
from reconciler.adapters.coordination.toozurl import driver_url
from reconciler.errors import CoordinationError
from reconciler.model.coordination import Holder

A = Holder("box-a", 101, "daemon")
B = Holder("box-b", 202, "apply")

HOLD = """
import sys, time
from reconciler.adapters.coordination.fleetlock import this_process
from reconciler.adapters.coordination.toozlock import ToozLocks
locks = ToozLocks(sys.argv[1], me=this_process("daemon"))
assert locks.lock("home").acquire()
print("held", flush=True)
time.sleep(60)
"""


def test_the_file_lock_has_no_ttl_and_stays_held(tmp_path: Path) -> None:
    locks = ToozLocks(default_url(tmp_path), me=A, ttl=3)
    try:
        assert math.isinf(locks.ttl)
        lock = locks.lock("home")
        assert lock.acquire()
        time.sleep(0.5)
        assert lock.held()
    finally:
        locks.close()


def test_a_waiting_acquire_gets_the_lock_once_the_holder_releases_it(tmp_path: Path) -> None:
    url = default_url(tmp_path)
    first, second = ToozLocks(url, me=A), ToozLocks(url, me=B)
    try:
        assert first.lock("home").acquire()
        got: list[bool] = []
        waiter = threading.Thread(
            target=lambda: got.append(second.lock("home").acquire(wait=math.inf))
        )
        waiter.start()
        time.sleep(1.0)
        assert got == []
        first.lock("home").release()
        waiter.join(10)
        assert got == [True]
        holder = first.lock("home").holder()
        assert holder is not None and holder.box == "box-b"
    finally:
        first.close()
        second.close()


def test_a_waiting_acquire_gives_up_when_stopped(tmp_path: Path) -> None:
    url = default_url(tmp_path)
    first, second = ToozLocks(url, me=A), ToozLocks(url, me=B)
    try:
        assert first.lock("home").acquire()
        stop = threading.Event()
        threading.Timer(0.5, stop.set).start()
        started = time.monotonic()
        assert second.lock("home").acquire(wait=math.inf, stop=stop) is False
        assert time.monotonic() - started < 5
    finally:
        first.close()
        second.close()


def test_a_holder_killed_with_sigkill_frees_the_lock_and_is_no_longer_named(
    tmp_path: Path,
) -> None:
    url = default_url(tmp_path)
    root = Path(__file__).resolve().parent.parent
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, url],
        stdout=subprocess.PIPE,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    locks = ToozLocks(url, me=this_process("apply"))
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"held"
        lock = locks.lock("home")
        assert lock.acquire() is False
        holder = lock.holder()
        assert holder is not None
        assert (holder.box, holder.pid) == (socket.gethostname(), child.pid)

        child.send_signal(signal.SIGKILL)
        child.wait(10)

        assert lock.acquire()
        holder = lock.holder()
        assert holder is not None and holder.pid == os.getpid()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        locks.close()


def test_the_etcd_url_gets_lease_and_request_timeouts_from_the_ttl() -> None:
    url = driver_url("etcd3+http://10.0.0.5:2379", 20)
    assert url.startswith("etcd3+http://10.0.0.5:2379?")
    assert "lock_timeout=20" in url and "membership_timeout=20" in url and "timeout=3" in url
    assert "lock_timeout=7" in driver_url("etcd3+http://h:2379?lock_timeout=7", 20)
    assert driver_url("zookeeper://zk:2181", 30) == "zookeeper://zk:2181?timeout=30"


def test_the_file_driver_runs_its_group_calls_inline_unless_the_url_says_otherwise() -> None:
    # tooz's default executor, a one-thread pool, made every stop wait up to 1 s.
    options = dict(parse_qsl(urlsplit(driver_url("file:///var/lib/proxyfleet/locks", 20)).query))
    assert options["executor"] == "synchronous"
    mine = driver_url("file:///var/lib/proxyfleet/locks?executor=threaded", 20)
    assert dict(parse_qsl(urlsplit(mine).query))["executor"] == "threaded"


def test_releasing_a_file_lock_and_closing_returns_at_once(tmp_path: Path) -> None:
    # With the thread pool, close() waited ~1.0 s for its idle worker every time.
    locks = ToozLocks(default_url(tmp_path), me=A)
    lock = locks.lock("f")
    assert lock.acquire()
    started = time.monotonic()
    lock.release()
    locks.close()
    assert time.monotonic() - started < 0.5


def test_an_unknown_coordination_scheme_is_refused() -> None:
    with pytest.raises(CoordinationError, match="scheme must be one of"):
        driver_url("redis://localhost:6379", 20)


def test_an_unreachable_etcd_raises_coordination_error_instead_of_hanging() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed
    locks = ToozLocks(f"etcd3+http://127.0.0.1:{port}", me=A, ttl=6)
    try:
        with pytest.raises(CoordinationError, match=r"127\.0\.0\.1"):
            locks.lock("home").acquire()
        assert locks.lock("home").holder() is None
        assert not locks.lock("home").held()
    finally:
        locks.close()


def test_a_zookeeper_url_without_kazoo_installed_says_what_is_missing() -> None:
    locks = ToozLocks("zookeeper://127.0.0.1:1", me=A, ttl=6)
    try:
        with pytest.raises(CoordinationError, match="needs the kazoo package"):
            locks.lock("home").acquire()
    finally:
        locks.close()


def test_the_holder_is_still_named_long_after_it_took_the_file_lock(tmp_path: Path) -> None:
    url = default_url(tmp_path)
    first, second = ToozLocks(url, me=A), ToozLocks(url, me=B)
    try:
        assert first.lock("home").acquire()
        hour_ago = time.time() - 3600
        for record in (tmp_path / "locks" / "groups").rglob("*.raw"):
            os.utime(record, (hour_ago, hour_ago))  # as if taken an hour ago, never touched

        holder = second.lock("home").holder()
        assert holder is not None and holder.box == "box-a"
    finally:
        first.close()
        second.close()


FRESH = """
import socket, sys
from reconciler.model.coordination import Holder
from reconciler.adapters.coordination.toozlock import ToozLocks
from reconciler.errors import CoordinationError
locks = ToozLocks(sys.argv[1], me=Holder("box-a", 101, "apply"), ttl=6)
try:
    print("acquired", locks.lock("home").acquire())
except CoordinationError as exc:
    print("coordination error:", exc)
locks.close()
print("etcd client loaded:", "etcd3gw" in sys.modules, "requests" in sys.modules)
"""


def fresh(url: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", FRESH, url], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout


def test_a_file_lock_never_loads_the_etcd_client(tmp_path: Path) -> None:
    # The etcd client brings requests: about 0.1 s of every `proxyfleet apply`'s start.
    assert fresh(default_url(tmp_path)).splitlines() == [
        "acquired True",
        "etcd client loaded: False False",
    ]


def test_an_etcd_client_loaded_only_by_tooz_still_has_its_errors_classified() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once closed

    out = fresh(f"etcd3+http://127.0.0.1:{port}").splitlines()

    assert out[0].startswith("coordination error:") and "127.0.0.1" in out[0]
    assert out[1] == "etcd client loaded: True True"
