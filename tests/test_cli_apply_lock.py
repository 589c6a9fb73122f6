"""``proxyfleet apply`` and the fleet lock: refuse naming the holder, or wait (--lock-timeout)."""

from __future__ import annotations

import math
import threading

import pytest

from reconciler.adapters.coordination.fakelock import FakeLockBackend, FakeLocks
from reconciler.cli import build_parser
from reconciler.cli.common import take_lock
from reconciler.model.coordination import Holder

DAEMON = Holder("mgmt1", 812, "daemon")
APPLY = Holder("laptop", 4242, "apply")


def test_apply_beside_the_holder_refuses_and_names_box_pid_and_since(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = FakeLockBackend()
    assert FakeLocks(backend, DAEMON).lock("home").acquire()
    lock = FakeLocks(backend, APPLY).lock("home")

    assert take_lock(lock, timeout=0.0, stop=threading.Event()) is False

    err = capsys.readouterr().err
    assert "fleet home is locked by daemon on mgmt1 (pid 812, since " in err
    assert "nothing was applied. Pass --lock-timeout" in err


def test_apply_with_wait_takes_the_lock_once_the_holder_lets_go(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = FakeLockBackend()
    daemon = FakeLocks(backend, DAEMON).lock("home")
    assert daemon.acquire()
    lock = FakeLocks(backend, APPLY).lock("home")
    threading.Timer(0.3, daemon.release).start()

    assert take_lock(lock, timeout=math.inf, stop=threading.Event()) is True

    assert lock.held()
    assert "Waiting for the lock of fleet home, held by daemon on mgmt1" in capsys.readouterr().err


def test_apply_stopped_while_waiting_applies_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    backend = FakeLockBackend()
    assert FakeLocks(backend, DAEMON).lock("home").acquire()
    lock = FakeLocks(backend, APPLY).lock("home")
    stop = threading.Event()
    threading.Timer(0.2, stop.set).start()

    assert take_lock(lock, timeout=math.inf, stop=stop) is False

    assert not lock.held()
    assert "stopped while waiting; nothing was applied" in capsys.readouterr().err


def test_an_unreachable_coordination_service_is_named_and_nothing_is_applied(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = FakeLockBackend()
    backend.down = True

    assert (
        take_lock(FakeLocks(backend, APPLY).lock("home"), timeout=math.inf, stop=threading.Event())
        is False
    )

    err = capsys.readouterr().err
    assert "cannot take the lock of fleet home: fake coordination service is down" in err


def test_a_lock_timeout_gives_up_on_a_lock_still_held_after_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    backend = FakeLockBackend()
    assert FakeLocks(backend, DAEMON).lock("home").acquire()
    lock = FakeLocks(backend, APPLY).lock("home")

    assert take_lock(lock, timeout=0.2, stop=threading.Event()) is False

    err = capsys.readouterr().err
    assert "Waiting up to 0.2 s for the lock of fleet home, held by daemon on mgmt1" in err
    assert "still locked by daemon on mgmt1" in err and "nothing was applied" in err


def test_lock_timeout_takes_durations_and_forever_and_wait_is_its_deprecated_forever(
    capsys: pytest.CaptureFixture[str],
) -> None:
    parser = build_parser()
    assert parser.parse_args(["apply"]).lock_timeout == 0.0
    assert parser.parse_args(["apply", "--lock-timeout", "10m"]).lock_timeout == 600.0
    assert parser.parse_args(["apply", "--lock-timeout", "90"]).lock_timeout == 90.0
    assert parser.parse_args(["apply", "--lock-timeout", "forever"]).lock_timeout == math.inf
    assert capsys.readouterr().err == ""
    old = parser.parse_args(["apply", "--wait", "--no-wait"])
    assert old.lock_timeout == math.inf and old.no_wait  # --no-wait: VM addresses, not the lock
    assert capsys.readouterr().err == (
        "proxyfleet apply: --wait is deprecated; say --lock-timeout forever\n"
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["apply", "--lock-timeout", "soon"])
