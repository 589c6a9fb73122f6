"""A rollback accepted deliberately (``repo.allowNonFastForward``) is a warning naming both
revisions and the deletes its plan makes, counted and named up to a cap."""

from __future__ import annotations

import logging
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.adapters.git.fakesource import FakeSource
from reconciler.engine.cycle import NAMED_DELETES, source_cycle
from reconciler.model.plan import Delete, Keep, Plan
from reconciler.model.report import RunReport, RunResult

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
NEW, OLD = "b" * 40, "a" * 40


def deleting(*proxies: str) -> RunReport:
    actions = (
        Keep(reason="up to date", proxy="web-1", host="kvm01", domain="pf-home-web-1-11111111"),
        *(
            Delete(reason="no manifest", proxy=p, host="kvm02", domain=f"pf-home-{p}-22222222")
            for p in proxies
        ),
    )
    return RunReport(T0, T0, RunResult.SUCCESS, revision=NEW, plan=Plan(actions=actions))


def run_cycle(tmp_path: Path, report: RunReport, *, rolled_back_from: str) -> None:
    source = FakeSource(tmp_path, revision=NEW, rolled_back_from=rolled_back_from)
    source_cycle(source, lambda root, revision: report)(threading.Event())


def test_an_accepted_rollback_warns_with_both_revisions_and_the_deletes_it_plans(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="reconciler.engine.cycle"):
        run_cycle(tmp_path, deleting("web-2", "web-3"), rolled_back_from=OLD)

    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warning == (
        "Rollback accepted (repo.allowNonFastForward): bbbbbbbbbbbb does not descend from the "
        "last revision aaaaaaaaaaaa; its plan deletes 2 VM(s): "
        "web-2 (pf-home-web-2-22222222 on kvm02), web-3 (pf-home-web-3-22222222 on kvm02)."
    )


def test_a_rollback_with_many_deletes_names_the_first_ones_and_counts_the_rest(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    proxies = [f"web-{n:02d}" for n in range(NAMED_DELETES + 3)]
    with caplog.at_level(logging.WARNING, logger="reconciler.engine.cycle"):
        run_cycle(tmp_path, deleting(*proxies), rolled_back_from=OLD)

    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"its plan deletes {NAMED_DELETES + 3} VM(s): web-00 (" in warning
    assert f"web-{NAMED_DELETES - 1:02d} (" in warning
    assert f"web-{NAMED_DELETES:02d}" not in warning
    assert warning.endswith(" and 3 more.")


def test_a_rollback_that_deletes_nothing_says_so_and_a_fast_forward_is_not_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="reconciler.engine.cycle"):
        run_cycle(tmp_path, deleting(), rolled_back_from=OLD)
        run_cycle(tmp_path, deleting("web-2"), rolled_back_from="")

    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].endswith("aaaaaaaaaaaa; its plan deletes no VM.")
