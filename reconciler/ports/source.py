"""The source seam: where the engine gets the fleet repo's files and revision.

Real: ``GitSource`` (reconciler.adapters.git.gitsource). Fake: ``FakeSource``
(reconciler.adapters.git.fakesource), a fixed directory for unit tests. Contract:
tests/test_source_contract.py (the fake and ``GitSource`` over a bare repository). The
value it hands out, ``Checkout``, is a model value (reconciler.model.checkout).
"""

from __future__ import annotations

from typing import Protocol

from reconciler.model.checkout import Checkout


class Source(Protocol):
    def sync(self) -> Checkout:
        """Bring the checkout to the head of the branch and return it.

        Cost: one fetch from the remote (network), one checkout. Raises
        SourceError when there is no usable revision: the first clone failed,
        or ``verifyCommits`` refused the head (the previous checkout stays on
        disk but is not returned, so nothing acts on a refused head).
        """
        ...
