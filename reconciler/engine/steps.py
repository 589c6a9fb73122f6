"""A run's steps for those who wait on it: the daemon's log lines, relayed to its RunBoard.

``proxyfleet reconcile`` streams the progress of the run it asked for, as ``flux
reconcile`` does. The steps are what the daemon's journal shows for that run
(INFO and above of the ``reconciler`` loggers: "Reconcile started", each action,
its health gate, "Reconcile finished"), nothing more: the log lines already carry
names and ids only, never input text. ``relay_to(board)`` marks the calling
thread's context (the daemon's loop, per fleet) and the worker threads it hands
its context to (``logfields.carry``); ``StepRelay``, installed once on the
``reconciler`` logger, notes each line logged in a marked context on that board.
Lines of other threads (the HTTP endpoint, another fleet's loop) go nowhere.
"""

from __future__ import annotations

import contextvars
import logging
import threading

from reconciler.ports.board import Board

LOGGER = "reconciler"
"""The logger the relay sits on: every module of the package logs below it."""

_BOARD: contextvars.ContextVar[Board | None] = contextvars.ContextVar(
    "proxyfleet_run_board", default=None
)
_INSTALL = threading.Lock()


class StepRelay(logging.Handler):
    """Notes each record logged in a context marked by ``relay_to`` on its board."""

    def emit(self, record: logging.LogRecord) -> None:
        board = _BOARD.get()
        if board is None:
            return
        try:
            board.note(record.getMessage())
        except Exception:  # noqa: BLE001 - a handler must never raise into the code that logged
            self.handleError(record)


def relay_to(board: Board) -> None:
    """From here on in this context (and the worker threads it is carried to), log lines
    are steps on ``board``; installs the relay the first time."""
    install()
    _BOARD.set(board)


def install() -> None:
    """The relay on the ``reconciler`` logger at INFO, once per process."""
    logger = logging.getLogger(LOGGER)
    with _INSTALL:
        if not any(isinstance(h, StepRelay) for h in logger.handlers):
            logger.addHandler(StepRelay(logging.INFO))
