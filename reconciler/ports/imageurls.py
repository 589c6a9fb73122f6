"""The image URL seam: which image URLs the box's cache would fetch, asked before planning.

Real: ``check_url`` (reconciler.adapters.hypervisor.images.imageurls), the same rule the
cache applies when it downloads. No fake: the rule is a pure function, and unit tests use
it as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol


class UrlRule(Protocol):
    def __call__(self, url: str, *, allowed_file_dirs: Sequence[Path] = ()) -> None:
        """Return when the cache would fetch ``url``; raise PermanentError naming the rule
        it breaks otherwise. ``file://`` URLs only under ``allowed_file_dirs``. No I/O
        but a ``realpath`` of a file URL's path."""
        ...


UrlCheck = Callable[[str], None]
"""The rule bound to the box's settings (``UrlRule`` with its ``allowed_file_dirs``)."""
