"""``python -m lab.suite``: the lab tests split into two pytest runs side by side, each on
its own lab instance; every lab module runs in exactly one of them, and a failure in
either fails the whole."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lab import suite


def modules_of(args: list[str]) -> set[str]:
    """The lab modules a run's arguments select, as pytest would."""
    paths = [Path(a) for a in args if not a.startswith("-")]
    ignored = {Path(a.removeprefix("--ignore=")) for a in args if a.startswith("--ignore=")}
    found: set[str] = set()
    for path in paths:
        files = sorted(path.glob("test_*.py")) if path.is_dir() else [path]
        found.update(f.name for f in files if f not in ignored)
    return found


def test_every_lab_module_runs_in_exactly_one_of_the_two_streams() -> None:
    first, rest = suite.commands(["-q"])
    a, b = modules_of(first), modules_of(rest)
    every = {f.name for f in suite.TESTS.glob("test_*.py")}
    assert a == set(suite.FIRST)
    assert a.isdisjoint(b)
    assert a | b == every
    assert first[-1] == rest[-1] == "-q"  # the extra arguments reach both


def test_a_module_named_in_first_that_does_not_exist_stops_the_suite(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(suite, "FIRST", (*suite.FIRST, "test_e2e_gone.py"))
    with pytest.raises(SystemExit, match=r"test_e2e_gone\.py"):
        suite.commands([])


def test_the_suite_fails_when_either_run_fails_and_says_which(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Each run's pytest replaced by a one-line script that exits with its instance number;
    the lines come out prefixed and the exit code is the non-zero one."""
    calls: list[list[str]] = []
    real = subprocess.Popen

    def popen(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        calls.append(argv)
        instance = kwargs["env"]["PROXYFLEET_LAB_INSTANCE"]  # type: ignore[index]
        script = f"print('ran {instance}'); raise SystemExit({instance})"
        return real([sys.executable, "-c", script], **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.setattr(suite.subprocess, "Popen", popen)
    assert suite.run((0, 3), ["-q"]) == 3
    out = capfd.readouterr().out
    assert "[lab-0] ran 0" in out and "[lab-3] ran 3" in out
    assert "[lab-3] exit 3" in out
    assert all("--basetemp=/tmp/proxyfleet-lab-" in " ".join(argv) for argv in calls)
    assert suite.run((0, 0), []) == 0  # both exit 0


def test_with_non_lab_a_third_run_takes_every_test_not_marked_lab_and_its_failure_counts(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The non-lab run gets no lab instance and no lab arguments; the lab runs pass, it
    fails, and the suite fails with its code."""
    calls: list[tuple[list[str], str | None]] = []
    real = subprocess.Popen

    def popen(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        instance = kwargs["env"].get("PROXYFLEET_LAB_INSTANCE")  # type: ignore[attr-defined]
        calls.append((argv, instance))
        code = 0 if instance is not None else 7
        script = f"print('ran {instance}'); raise SystemExit({code})"
        return real([sys.executable, "-c", script], **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.delenv("PROXYFLEET_LAB_INSTANCE", raising=False)
    monkeypatch.setattr(suite.subprocess, "Popen", popen)
    assert suite.run((0, 1), ["--durations-min=30"], non_lab=True) == 7
    out = capfd.readouterr().out
    assert "[non-lab] ran None" in out and "[non-lab] exit 7" in out
    (non_lab,) = [argv for argv, instance in calls if instance is None]
    assert non_lab[non_lab.index("-m", 3) + 1] == "not lab"
    assert "--durations-min=30" not in non_lab
    assert not any(a.startswith("--basetemp") or a.endswith(".py") for a in non_lab)
    assert sorted(instance for _, instance in calls if instance) == ["0", "1"]


def test_the_last_lines_say_each_runs_failures_and_exit_even_when_another_run_printed_after_it(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """The non-lab run fails early with pytest's short summary; the lab runs print long
    after it. The log's tail still names the failed test and the run's exit; a run killed
    before its summary has its last lines said instead."""
    real = subprocess.Popen

    def popen(argv: list[str], **kwargs: object) -> subprocess.Popen[bytes]:
        instance = kwargs["env"].get("PROXYFLEET_LAB_INSTANCE")  # type: ignore[attr-defined]
        if instance is None:
            script = (
                "print('...F.');"
                "print('==== short test summary info ====');"
                "print('FAILED tests/test_x.py::test_y - assert 1 == 2');"
                "print('1 failed, 4 passed in 9.00s'); raise SystemExit(1)"
            )
        elif instance == "0":
            script = (
                "import time; time.sleep(0.5);"
                "[print(f'line {i}') for i in range(50)];"
                "print('==== short test summary info ====');"
                "print('3 passed in 80.00s')"
            )
        else:
            script = (
                "import time; time.sleep(0.5);"
                "[print(f'boot {i}') for i in range(9)]; raise SystemExit(-9)"
            )
        return real([sys.executable, "-c", script], **kwargs)  # type: ignore[call-overload,no-any-return]

    monkeypatch.delenv("PROXYFLEET_LAB_INSTANCE", raising=False)
    monkeypatch.setattr(suite.subprocess, "Popen", popen)
    assert suite.run((0, 1), [], non_lab=True) != 0
    out = capfd.readouterr().out
    tail = out[out.rindex("==== lab.suite: how each run ended") :].splitlines()
    assert "[non-lab] FAILED tests/test_x.py::test_y - assert 1 == 2" in tail
    assert any(line.startswith("[non-lab] exit 1 after") for line in tail)
    assert "[lab-0] 3 passed in 80.00s" in tail and "[lab-0] line 49" not in tail
    assert [line for line in tail if line.startswith("[lab-1] boot")] == [
        f"[lab-1] boot {i}" for i in range(4, 9)
    ]
    assert tail[-1].startswith("[non-lab] exit 1 after")


def test_a_summary_longer_than_the_cap_keeps_its_first_lines_and_its_counts() -> None:
    ending = suite.Ending("[lab-0] ")
    ending.saw(b"==== short test summary info ====\n")
    for i in range(200):
        ending.saw(f"FAILED t::test_{i}\n".encode())
    ending.saw(b"200 failed in 1.00s\n")
    lines = ending.lines()
    assert len(lines) == suite.SUMMARY_LINES
    assert lines[1] == b"[lab-0] FAILED t::test_0\n"
    assert lines[-2].startswith(b"[lab-0] ... (") and lines[-1] == b"[lab-0] 200 failed in 1.00s\n"
