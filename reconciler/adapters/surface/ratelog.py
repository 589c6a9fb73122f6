"""A warning that a client can provoke at will, logged at most once per interval."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable


class RateLimitedLog:
    """Logs ``message`` at most once per ``interval`` seconds; the next line that is
    written says how many were left out (``suffix``, formatted with that count)."""

    def __init__(
        self,
        logger: logging.Logger,
        interval: float,
        clock: Callable[[], float],
        *,
        suffix: str = " (%d more since the last such line)",
    ) -> None:
        self._logger = logger
        self._interval = interval
        self._clock = clock
        self._suffix = suffix
        self._lock = threading.Lock()
        self._last: float | None = None
        self._dropped = 0

    def log(self, message: str, *args: object) -> None:
        with self._lock:
            now = self._clock()
            if self._last is not None and now - self._last < self._interval:
                self._dropped += 1
                return
            dropped, self._dropped, self._last = self._dropped, 0, now
        if dropped:
            self._logger.warning(message + self._suffix, *args, dropped)
        else:
            self._logger.warning(message, *args)
