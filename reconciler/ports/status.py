"""The status seam: each run's report, written back to the fleet repo's status branch.

Real: ``GitStatusWriter`` (reconciler.adapters.git.statuswriter). Fake:
``MemoryStatusSink`` (same module), which keeps the documents it would commit. Contract:
tests/test_status_sink_contract.py (a bare repository).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol

from reconciler.model.checkout import Published
from reconciler.model.report import RunReport

StatusReader = Callable[[Path], Mapping[str, Any] | None]
"""The fleet's last status document as the checkout at a directory can fetch it; None
when there is none. Real: ``last_status`` (reconciler.adapters.git.fleetrevision), bound
to the config's status branch. Fake: any function a test writes (no state of its own)."""


class StatusSink(Protocol):
    def publish(self, report: RunReport) -> Published:
        """Record ``report``; commit and push when something meaningful changed.

        Cost: one fetch, and a commit + push when the status changed. Never
        raises for git or network failures: they come back in ``error``.
        """
        ...
