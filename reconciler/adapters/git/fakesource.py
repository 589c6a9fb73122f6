"""The fake of the source seam (reconciler.ports.source), for unit tests: a directory, a
revision, optional failures.

It keeps the promises ``GitSource`` keeps (the contract both pass:
tests/test_source_contract.py): a failed fetch hands out the last *accepted* revision
(and raises when nothing was accepted yet), a refused head raises with its revision and
leaves the accepted one as it was, and a rollback is named once, by the sync that takes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from reconciler.errors import SourceError
from reconciler.model.checkout import Checkout


@dataclass
class FakeSource:
    """``root`` at ``revision``, the head of the branch. ``fetch_error`` makes the remote
    out of reach, ``error`` refuses the head (verifyCommits, a force-push),
    ``rolled_back_from`` makes the next accepted head a rollback from that revision."""

    root: Path
    revision: str = "0" * 40
    fetch_error: str = ""
    error: str = ""
    rolled_back_from: str = ""
    syncs: int = 0
    accepted: str = ""
    """The revision the last good sync handed out ("" before one)."""

    def sync(self) -> Checkout:
        self.syncs += 1
        if self.fetch_error:
            if not self.accepted:
                raise SourceError(self.fetch_error)
            return Checkout(revision=self.accepted, root=self.root, fetch_error=self.fetch_error)
        if self.error:
            raise SourceError(self.error, revision=self.revision)
        rolled_back_from = self.rolled_back_from if self.revision != self.accepted else ""
        self.accepted, self.rolled_back_from = self.revision, ""
        return Checkout(revision=self.revision, root=self.root, rolled_back_from=rolled_back_from)
