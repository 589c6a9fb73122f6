"""Progress of long steps (image download and upload, apply's wait for health), as log records.

A step reports its progress with ``emit``: one INFO line on the
``reconciler.progress`` logger, carrying a ``ProgressEvent`` as the record's
``progress`` attribute. Whoever reads the log decides how to show it: the
daemon and a piped command print the line like any other (every few seconds,
as the step decides); ``proxyfleet apply`` on a terminal draws a progress bar
per step from the events instead (reconciler.cli.progress). Logging is the
channel so that no adapter needs a new parameter to be watched, and a step
never waits for a slow terminal.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

LOGGER = "reconciler.progress"
ATTRIBUTE = "progress"
"""The LogRecord attribute holding the ProgressEvent."""

log = logging.getLogger(LOGGER)


@dataclass(frozen=True, slots=True)
class ProgressEvent:
    task: str
    """Stable key of the step, e.g. ``download debian-12`` (one bar per key)."""
    description: str
    """What a bar is labelled with."""
    done: float
    total: float | None
    """None while unknown (a download without Content-Length)."""
    unit: str
    """``bytes`` or ``proxies``."""
    finished: bool = False
    note: str = ""
    """The latest detail, e.g. ``web-1 healthy``."""


def emit(event: ProgressEvent, message: str, *args: object) -> None:
    """Log ``message`` (at INFO, on the progress logger) carrying ``event``."""
    log.info(message, *args, extra={ATTRIBUTE: event})
