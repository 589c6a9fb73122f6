"""The fake of the source seam (reconciler.ports.source), for unit tests: a directory, a
revision, optional failures."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reconciler.errors import SourceError
from reconciler.model.checkout import Checkout


@dataclass
class FakeSource:
    """Returns ``root`` at ``revision``; ``fetch_error`` or ``error`` simulate failures,
    ``rolled_back_from`` an accepted rollback."""

    root: Path
    revision: str = "0" * 40
    fetch_error: str = ""
    error: str = ""
    rolled_back_from: str = ""
    syncs: int = 0

    def sync(self) -> Checkout:
        self.syncs += 1
        if self.error:
            raise SourceError(self.error, revision=self.revision)
        return Checkout(
            revision=self.revision,
            root=self.root,
            fetch_error=self.fetch_error,
            rolled_back_from=self.rolled_back_from,
        )
