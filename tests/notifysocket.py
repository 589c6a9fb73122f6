"""systemd's end of sd_notify for tests: a NOTIFY_SOCKET that records every datagram.

Not a fake of the notifier seam (that is ``FakeNotifier``, next to ``SdNotify``): a real
unix datagram socket, bound where systemd would bind it, that ``SdNotify`` sends to.
"""

from __future__ import annotations

import socket
from pathlib import Path


class NotifySocket:
    """Bound at ``path`` on creation; ``close`` unbinds it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.05)
        self.messages: list[str] = []

    def drain(self) -> list[str]:
        """Every datagram received so far, oldest first."""
        while True:
            try:
                self.messages.append(self.sock.recv(4096).decode())
            except TimeoutError:
                return self.messages

    def lines(self) -> list[str]:
        return [line for message in self.drain() for line in message.splitlines()]

    def close(self) -> None:
        self.sock.close()
        self.path.unlink(missing_ok=True)
