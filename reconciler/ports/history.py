"""The history seam: what earlier runs saw (crash loops, failing probes, a halted rollout).

Real: ``FileHistoryStore`` (reconciler.adapters.state.historystore), ``history.json`` in
the state dir. Fake: ``MemoryHistoryStore`` (same module), this process only: for tests,
and a one-off ``apply`` without a state dir. Contract: tests/test_history_store_contract.py.
"""

from __future__ import annotations

from typing import Protocol

from reconciler.model.history import History


class HistoryStore(Protocol):
    def load(self) -> History:
        """What the last run saved; an empty History when there is none. Never raises."""
        ...

    def save(self, history: History) -> None:
        """Replace what is kept. Raises OSError when the state dir cannot be written."""
        ...
