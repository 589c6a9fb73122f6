"""One contract, two history stores: the same cases against the in-memory one and the file.

``MemoryHistoryStore`` stands in for ``FileHistoryStore`` in every engine unit test (it is
the Engine's default), so a rule that drifts between them (a time kept more finely, a
halt merged instead of replaced) makes those tests prove the wrong thing. Each case runs
against both; the file one writes ``history.json`` in a temporary state dir.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from reconciler.adapters.state.historystore import FileHistoryStore, MemoryHistoryStore
from reconciler.model.history import Halt, History, VmRecord
from reconciler.model.plan import DomainRef
from reconciler.ports.history import HistoryStore

SINCE = datetime(2026, 9, 4, 14, 0, 7, tzinfo=UTC)


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> HistoryStore:
    if request.param == "memory":
        return MemoryHistoryStore()
    return FileHistoryStore(tmp_path / "history.json")


def a_history(*, proxy: str = "web-1", at: datetime = SINCE) -> History:
    record = VmRecord(
        failing_since=at,
        healthy_once=True,
        restarts=(at, at.replace(minute=5)),
        healthy_since=None,
        suspect_at=at,
    )
    halt = Halt(
        revision="c0ffee", proxy=proxy, domain=f"pf-home-{proxy}-1", reason="unhealthy", since=at
    )
    return History(vms=((DomainRef("kvm01", f"pf-home-{proxy}-1"), record),), halts=(halt,))


def test_contract_a_new_store_loads_an_empty_history(store: HistoryStore) -> None:
    assert store.load() == History()


def test_contract_what_is_saved_is_loaded_back_record_for_record(store: HistoryStore) -> None:
    saved = a_history()

    store.save(saved)

    assert store.load() == saved


def test_contract_a_save_replaces_the_history_before_it_and_merges_nothing(
    store: HistoryStore,
) -> None:
    store.save(a_history(proxy="web-1"))
    store.save(a_history(proxy="web-2"))

    loaded = store.load()

    assert [ref.domain for ref, _ in loaded.vms] == ["pf-home-web-2-1"]
    assert [h.proxy for h in loaded.halts] == ["web-2"]


def test_contract_times_are_kept_to_the_second(store: HistoryStore) -> None:
    store.save(a_history(at=SINCE.replace(microsecond=654321)))

    loaded = store.load()

    assert loaded == a_history(at=SINCE)


def test_contract_what_a_run_plans_for_is_not_kept_only_what_it_saw(store: HistoryStore) -> None:
    # ``now`` and ``revision`` say what a plan is made for; the next run gives its own.
    store.save(History(now=SINCE, revision="c0ffee", vms=a_history().vms))

    loaded = store.load()

    assert (loaded.now, loaded.revision) == (None, "")
    assert loaded.vms == a_history().vms
