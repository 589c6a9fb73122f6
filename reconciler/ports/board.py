"""The board seam: where the steps of a run go for those who wait on it
(``proxyfleet reconcile``), relayed from the daemon's log lines (reconciler.engine.steps).

Real: ``RunBoard`` (reconciler.engine.control), the control socket's view of a run.
No fake: tests use ``RunBoard`` itself, which is memory only.
"""

from __future__ import annotations

from typing import Protocol


class Board(Protocol):
    def note(self, line: str) -> None:
        """One step, as its log line says it. Cost: a lock and an append; never raises."""
        ...
