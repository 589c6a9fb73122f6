"""An in-memory ConsoleStream for unit tests of the terminal loop (the seam:
reconciler.ports.console)."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from reconciler.errors import TransientError


class FakeConsole:
    """Answers what is written with ``respond(data)`` (bytes the "guest" prints back);
    ``emit`` queues output as if the guest wrote it; ``hang_up`` closes it from the host's
    side."""

    def __init__(self, respond: Callable[[bytes], bytes] | None = None) -> None:
        self._respond = respond
        self._out: queue.Queue[bytes] = queue.Queue()
        self._closed = threading.Event()
        self.written = bytearray()
        """Everything sent to the guest, in order."""

    def emit(self, data: bytes) -> None:
        self._out.put(data)

    def hang_up(self) -> None:
        self._closed.set()
        self._out.put(b"")

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def read(self) -> bytes:
        if self._closed.is_set() and self._out.empty():
            return b""
        return self._out.get()

    def write(self, data: bytes) -> None:
        if self._closed.is_set():
            raise TransientError("the console is closed", host="fake", rpc="virStreamSend")
        self.written += data
        if self._respond is not None:
            answer = self._respond(data)
            if answer:
                self._out.put(answer)

    def close(self) -> None:
        if not self._closed.is_set():
            self._closed.set()
            self._out.put(b"")
