"""Progress bars on a terminal (rich) for the steps that report progress (reconciler.progress).

``progress_bars(True)`` swaps the root logger's handlers for ``ProgressView``
for the duration of a block: records carrying a ProgressEvent move a bar (one
per step: each image download and upload, apply's health checks); every other
record is printed above the bars, formatted as before. ``progress_bars(False)``
changes nothing: the progress records are plain log lines then, as in the
daemon's journal. Only this module imports rich.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from reconciler.progress import ATTRIBUTE, LOGGER, ProgressEvent

if TYPE_CHECKING:  # rich loads only when bars are drawn: every command starts without it
    from rich.console import Console
    from rich.progress import TaskID


class ProgressView(logging.Handler):
    """A logging handler drawing ProgressEvents as bars on ``console``."""

    def __init__(self, console: Console, formatter: logging.Formatter | None = None) -> None:
        from rich.progress import (
            BarColumn,
            Progress,
            TaskProgressColumn,
            TextColumn,
            TimeElapsedColumn,
        )

        super().__init__()
        if formatter is not None:
            self.setFormatter(formatter)
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TaskProgressColumn(),
            TextColumn("{task.fields[detail]}"),
            TimeElapsedColumn(),
            console=console,
        )
        self._tasks: dict[str, TaskID] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            event = getattr(record, ATTRIBUTE, None)
            if isinstance(event, ProgressEvent):
                self.show(event)
            else:
                self.progress.console.print(self.format(record), markup=False, highlight=False)
        except Exception:  # noqa: BLE001 - a handler must never raise into the code that logged
            self.handleError(record)

    def show(self, event: ProgressEvent) -> None:
        task = self._tasks.get(event.task)
        if task is None:
            task = self._tasks[event.task] = self.progress.add_task(
                event.description, total=event.total, detail=""
            )
        self.progress.update(task, completed=event.done, total=event.total, detail=detail(event))


def detail(event: ProgressEvent) -> str:
    """The text beside a bar: ``12.0/40.0 MB`` or ``2/3 proxies, web-1 healthy``."""
    if event.unit == "bytes":
        total = f"/{event.total / 1e6:.1f}" if event.total else ""
        return f"{event.done / 1e6:.1f}{total} MB"
    total = f"/{event.total:.0f}" if event.total is not None else ""
    note = f", {event.note}" if event.note else ""
    return f"{event.done:.0f}{total} {event.unit}{note}"


def show_progress_lines() -> None:
    """Progress lines at INFO even when the command logs only warnings (``apply``)."""
    logging.getLogger(LOGGER).setLevel(logging.INFO)


@contextlib.contextmanager
def progress_bars(enabled: bool) -> Iterator[bool]:
    """Bars instead of progress lines for the block when ``enabled`` (stdout is a terminal);
    yields whether they are drawn."""
    if not enabled:
        yield False
        return
    from rich.console import Console

    root = logging.getLogger()
    saved = root.handlers[:]
    console = Console(file=sys.stderr if sys.stderr.isatty() else sys.stdout)
    view = ProgressView(console, saved[0].formatter if saved else None)
    for kept in saved[0].filters if saved else ():
        view.addFilter(kept)  # the structured fields (reconciler.logfields)
    root.handlers[:] = [view]
    try:
        with view.progress:
            yield True
    finally:
        root.handlers[:] = saved
