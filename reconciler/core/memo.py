"""A bounded memo that its owner passes in: how the core keeps work across calls without a
module-level cache. The engine owns one per fleet (reconciler.core.load.loadmemo for its
loads, reconciler.core.plan.digest's ``Digests`` for its plans); a call without one
computes everything and keeps nothing."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

KEPT = 16384
"""Entries a table keeps by default; full, it starts over."""


class Table(Generic[K, V]):
    """Values by key, computed once; at ``size`` entries it starts over."""

    def __init__(self, size: int = KEPT) -> None:
        self._size = size
        self._values: dict[K, V] = {}

    def get(self, key: K, compute: Callable[[], V]) -> V:
        """The value of ``key``, computed now when not known (an exception keeps nothing)."""
        if key in self._values:
            return self._values[key]
        value = compute()
        if len(self._values) >= self._size:
            self._values.clear()
        self._values[key] = value
        return value
