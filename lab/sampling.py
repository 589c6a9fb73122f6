"""A look taken every few seconds in a thread, while a ``with`` block runs.

The lab tests and benchmarks watch what a fleet does while something else happens (a
rollout, a kill, a halt): who answers, which domains run, what the daemon says. Each
watcher is a ``Periodic`` whose ``look`` says what one look records.
"""

from __future__ import annotations

import threading
from typing import Self


class Periodic:
    """Calls ``look()`` every ``every`` seconds in a thread, from ``with`` until its end."""

    def __init__(self, every: float) -> None:
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def look(self) -> None:
        raise NotImplementedError

    def _run(self) -> None:
        while not self._stop.is_set():
            self.look()
            self._stop.wait(self.every)
