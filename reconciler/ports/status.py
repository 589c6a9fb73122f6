"""The status seam: each run's report, written back to the fleet repo's status branch.

Real: ``GitStatusWriter`` (reconciler.adapters.git.statuswriter). Fake:
``MemoryStatusSink`` (same module), which keeps the documents it would commit.
"""

from __future__ import annotations

from typing import Protocol

from reconciler.model.checkout import Published
from reconciler.model.report import RunReport


class StatusSink(Protocol):
    def publish(self, report: RunReport) -> Published:
        """Record ``report``; commit and push when something meaningful changed.

        Cost: one fetch, and a commit + push when the status changed. Never
        raises for git or network failures: they come back in ``error``.
        """
        ...
