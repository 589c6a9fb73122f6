"""The source seam: where the engine gets the fleet repo's files and revision.

``GitSource`` (reconciler.adapters.git.gitsource) is the real thing; ``FakeSource``
(reconciler.adapters.git.fakesource) hands out a fixed directory to unit tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Checkout:
    """A revision of the fleet repo, checked out and ready to load.

    ``root`` is the directory holding ``fleet.yaml`` (the repo's ``path``).
    ``fetch_error`` is set when the fetch failed and this is the last good
    checkout: the engine still reconciles it and reports the error.
    """

    revision: str
    root: Path
    fetch_error: str = ""
    rolled_back_from: str = ""
    """The revision checked out before, when this one does not descend from it and was
    accepted all the same (``repo.allowNonFastForward``: a rollback, a force-push); "" else."""


class Source(Protocol):
    def sync(self) -> Checkout:
        """Bring the checkout to the head of the branch and return it.

        Cost: one fetch from the remote (network), one checkout. Raises
        SourceError when there is no usable revision: the first clone failed,
        or ``verifyCommits`` refused the head (the previous checkout stays on
        disk but is not returned, so nothing acts on a refused head).
        """
        ...
