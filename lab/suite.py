"""``python -m lab.suite``: the lab tests (``tests/lab``) as two pytest runs side by side,
and with ``--with-non-lab`` the rest of the suite (``-m "not lab"``) as a third beside them.

Each run has a lab instance of its own (``PROXYFLEET_LAB_INSTANCE``: its own hosts,
addresses, state and image server) and a ``--basetemp`` of its own; the image cache is
shared (one build, under a lock). A TCG guest's boot keeps a core busy for ~1.5-2 min, but
much of a lab module waits with its guests idle: for replaceAfterSeconds, a daemon
interval, a health gate that can only fail. One module alone kept 1.15 of the 2 cores busy
on average (day 2, 2026-12-04), so two runs overlap one's waits with the other's boots.

The non-lab run (unit and integration tests: real libvirtd, sshd, etcd and a systemd box on
the machine itself, none of the lab's namespaces) took 850 s alone before the labs started,
most of it waiting. Beside them its waits overlap their boots; its CPU slows their guests
(fresh clone 2026-12-04: 60.5 min in all against 63.2 min). It needs no lab instance.

Stream A runs ``FIRST`` (the daemon modules: about half of the suite's time); stream B every
other module in ``tests/lab``, so that a new module runs without being listed. Both print
their lines as they come, prefixed ``[lab-k]``; the exit code is the first non-zero one of
the two (pytest's 5, no test collected, included). Once all have ended, each run's short
summary (what failed, what was skipped, its counts) and exit are said again, one run after
the other, as the last lines: a CI log shown only by its tail still says which run failed
and what in it.
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests" / "lab"
FIRST = (
    "test_e2e_day2.py",
    "test_e2e_dns_rollout.py",
    "test_e2e_live.py",
    "test_e2e_daemon.py",
    "test_e2e_standby.py",
    "test_lab_hosts.py",
    "test_e2e_kvm.py",
)
"""Stream A's modules, in this order; ~2,100 s of the ~4,100 s run alone on 2026-12-04.
test_e2e_dns_rollout joined A (2026-12-06): B had since gained test_e2e_live, _drain and
_fixed_address; it follows day 2, whose two Debian 12 hosts it keeps. test_e2e_live moved to A
too (its rig is day 2's): on 2026-12-06 A took 2,091 s and B 3,144 s before either move,
and B has since gained test_e2e_drain (~1,200 s with one proxy; with two, 2,157 s alone
on 2026-12-06 at load 12-46 beside a 20-guest benchmark, its drain 592 s of it)."""


def commands(pytest_args: list[str]) -> tuple[list[str], list[str]]:
    """The pytest arguments of stream A and of stream B."""
    missing = [name for name in FIRST if not (TESTS / name).is_file()]
    if missing:
        raise SystemExit(f"lab.suite: FIRST names modules that do not exist: {missing}")
    first = [str(TESTS / name) for name in FIRST]
    rest = [str(TESTS), *(f"--ignore={path}" for path in first)]
    return first + pytest_args, rest + pytest_args


SUMMARY_MARK = b"short test summary info"
"""The line after which pytest says what failed, what was skipped and how the run ended."""
SUMMARY_LINES = 60
"""At most this many of a run's summary lines are said again at the end."""
TAIL_LINES = 5
"""A run that printed no summary (killed, or stopped before pytest's own report) has its
last lines said again instead."""


class Ending:
    """What one run said at its end: pytest's short summary when it printed one, else its
    last lines, and how it exited. Said again, together, once every run has ended: the
    runs' lines interleave, and a CI log is often read from its tail."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.summary: list[bytes] | None = None
        self.tail: collections.deque[bytes] = collections.deque(maxlen=TAIL_LINES)
        self.exit_line = ""

    def saw(self, line: bytes) -> None:
        self.tail.append(line)
        if self.summary is not None:
            self.summary.append(line)
        elif SUMMARY_MARK in line:
            self.summary = [line]

    def lines(self) -> list[bytes]:
        said = self.summary if self.summary is not None else list(self.tail)
        if len(said) > SUMMARY_LINES:
            cut = len(said) - SUMMARY_LINES + 1
            said = [*said[: SUMMARY_LINES - 2], f"... ({cut} lines more)\n".encode(), said[-1]]
        return [self.prefix.encode() + line for line in said]


def _pump(
    ending: Ending, proc: subprocess.Popen[bytes], lock: threading.Lock, started: float
) -> None:
    """Copy the run's lines, prefixed, then say how it ended and when (its own time, not
    the time the other run was waited for)."""
    assert proc.stdout is not None
    for line in iter(proc.stdout.readline, b""):
        ending.saw(line)
        with lock:
            sys.stdout.buffer.write(ending.prefix.encode() + line)
            sys.stdout.buffer.flush()
    code = proc.wait()
    ending.exit_line = f"{ending.prefix}exit {code} after {time.monotonic() - started:.0f} s"
    with lock:
        print(ending.exit_line, flush=True)


def say_endings(endings: list[Ending]) -> None:
    """Every run's ending, one after the other, as the log's last lines."""
    sys.stdout.buffer.write(b"==== lab.suite: how each run ended\n")
    for ending in endings:
        for line in ending.lines():
            sys.stdout.buffer.write(line if line.endswith(b"\n") else line + b"\n")
        sys.stdout.buffer.write(ending.exit_line.encode() + b"\n")
    sys.stdout.buffer.flush()


NON_LAB_ARGS = ("-q", "-m", "not lab", "-p", "no:cacheprovider", "--durations=15")
"""The third run's pytest arguments (``--with-non-lab``)."""


def runs(
    instances: tuple[int, int], pytest_args: list[str], *, non_lab: bool
) -> list[tuple[str, list[str], dict[str, str]]]:
    """Each run's prefix, pytest arguments and extra environment."""
    planned = []
    for instance, args in zip(instances, commands(pytest_args), strict=True):
        basetemp = Path("/tmp") / f"proxyfleet-lab-{instance}"
        planned.append(
            (
                f"[lab-{instance}] ",
                ["-m", "lab", f"--basetemp={basetemp}", *args],
                {"PROXYFLEET_LAB_INSTANCE": str(instance)},
            )
        )
    if non_lab:
        planned.append(("[non-lab] ", list(NON_LAB_ARGS), {}))
    return planned


def run(instances: tuple[int, int], pytest_args: list[str], *, non_lab: bool = False) -> int:
    lock = threading.Lock()
    started = time.monotonic()
    procs: list[tuple[subprocess.Popen[bytes], threading.Thread]] = []
    endings: list[Ending] = []
    for prefix, args, extra_env in runs(instances, pytest_args, non_lab=non_lab):
        # Unbuffered: pytest's lines through a pipe would otherwise come in 8 KiB blocks,
        # and a run stopped by a CI timeout would lose them.
        env = {**os.environ, **extra_env, "PYTHONUNBUFFERED": "1"}
        proc = subprocess.Popen(
            [sys.executable, "-m", "pytest", *args],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        endings.append(Ending(prefix))
        pump = threading.Thread(target=_pump, args=(endings[-1], proc, lock, started), daemon=True)
        pump.start()
        procs.append((proc, pump))
    codes = []
    for proc, pump in procs:
        codes.append(proc.wait())
        pump.join()
    say_endings(endings)
    return next((code for code in codes if code != 0), 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.suite", description=__doc__)
    parser.add_argument(
        "--instances",
        default="0,1",
        help="the two lab instances, A's then B's (default 0,1)",
    )
    parser.add_argument(
        "--with-non-lab",
        action="store_true",
        help='also run pytest -m "not lab" beside the two lab runs',
    )
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER, help="passed to both lab runs")
    args = parser.parse_args(argv)
    a, b = (int(k) for k in args.instances.split(","))
    if a == b:
        parser.error("--instances needs two different instances")
    extra = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    return run((a, b), extra, non_lab=args.with_non_lab)


if __name__ == "__main__":
    raise SystemExit(main())
