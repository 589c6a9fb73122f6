"""systemd's sd_notify protocol over $NOTIFY_SOCKET, with a plain datagram socket.

No libsystemd: the protocol is one datagram of ``KEY=value`` lines. Without
NOTIFY_SOCKET (not under systemd, or Type= is not notify) every call is a no-op.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


class SdNotify:
    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        self._address = "\0" + address[1:] if address.startswith("@") else address
        self._watchdog_usec = 0
        pid = env.get("WATCHDOG_PID", "")
        if not pid or pid == str(os.getpid()):
            try:
                self._watchdog_usec = int(env.get("WATCHDOG_USEC", "0"))
            except ValueError:
                self._watchdog_usec = 0

    @property
    def enabled(self) -> bool:
        return bool(self._address)

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between WATCHDOG=1 pings (half of WatchdogSec), or None without a watchdog."""
        if not self.enabled or self._watchdog_usec <= 0:
            return None
        return self._watchdog_usec / 2_000_000

    def send(self, *lines: str) -> bool:
        if not self._address:
            return False
        message = "\n".join(lines).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(message, self._address)
        except OSError as exc:
            log.debug("sd_notify to %r failed: %s", self._address, exc)
            return False
        return True

    def ready(self, status: str = "") -> bool:
        return self.send("READY=1", *([f"STATUS={status}"] if status else []))

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={' '.join(text.split())}")

    def stopping(self, status: str = "") -> bool:
        return self.send("STOPPING=1", *([f"STATUS={status}"] if status else []))
