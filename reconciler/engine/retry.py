"""Retrying host calls that failed transiently: exponential backoff with jitter.

Only ``TransientError`` is retried. ``PermanentError`` and ``NotFoundError``
go straight back to the caller, who knows what they mean for its action.
Attempts are bounded by count and by time; a stop request ends the retrying
(the next run picks the work up again).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from reconciler.engine.runtime import Runtime
from reconciler.errors import TransientError
from reconciler.model.settings import ApplySettings

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(slots=True)
class Attempts:
    """Retries made by the calls of one action, for its outcome."""

    retries: int = 0


def backoff_delay(attempt: int, settings: ApplySettings, rand: float) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    "Equal jitter": half the exponential delay is fixed, half is random, so
    retries from many workers spread out but never come back immediately.
    """
    ceiling = min(settings.retry_max_delay, settings.retry_base_delay * 2.0 ** (attempt - 1))
    return ceiling / 2 + ceiling / 2 * rand


def call_with_retry(
    what: str,
    fn: Callable[[], T],
    *,
    settings: ApplySettings,
    runtime: Runtime,
    attempts: Attempts | None = None,
) -> T:
    """Call ``fn``, retrying ``TransientError`` with backoff; re-raise the last one.

    ``what`` names the call in log lines ("create pf-home-web-1-0123abcd on kvm01").
    """
    counter = attempts if attempts is not None else Attempts()
    started = runtime.monotonic()
    attempt = 0
    while True:
        attempt += 1
        try:
            return fn()
        except TransientError as exc:
            elapsed = runtime.monotonic() - started
            if attempt >= settings.max_attempts:
                log.warning("%s failed temporarily %d times; giving up: %s", what, attempt, exc)
                raise
            if runtime.stop.is_set():
                log.warning("%s failed temporarily; not retried, shutdown requested: %s", what, exc)
                raise
            delay = backoff_delay(attempt, settings, runtime.random())
            if elapsed + delay > settings.retry_deadline:
                log.warning(
                    "%s failed temporarily; retry deadline of %.0f s reached: %s",
                    what,
                    settings.retry_deadline,
                    exc,
                )
                raise
            log.info("%s failed temporarily, retrying in %.1f s: %s", what, delay, exc)
            runtime.sleep(delay)
            counter.retries += 1
