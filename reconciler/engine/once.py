"""A value computed once per key by the first caller and shared by the others (or its error
re-raised to each): the executor fetches an image, and uploads it to a host, once per run."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(slots=True)
class _Once:
    """A value computed by the first caller and shared (or its error re-raised)."""

    lock: threading.Lock
    done: bool = False
    value: object = None
    error: BaseException | None = None


class OncePerRun:
    """Thread-safe; build one per run, so that the next run fetches afresh."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[tuple[str, ...], _Once] = {}

    def get(self, key: tuple[str, ...], fn: Callable[[], T]) -> T:
        """``fn()`` once per key; concurrent callers wait for the first."""
        with self._lock:
            entry = self._entries.setdefault(key, _Once(threading.Lock()))
        with entry.lock:
            if not entry.done:
                try:
                    entry.value = fn()
                except Exception as exc:  # noqa: BLE001 - re-raised to every caller below
                    entry.error = exc
                entry.done = True
        if entry.error is not None:
            raise entry.error
        return entry.value  # type: ignore[return-value]
