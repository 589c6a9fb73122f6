"""The notifier seam: the service manager (systemd's sd_notify).

Real: ``SdNotify`` (reconciler.adapters.surface.notify), one datagram per call over
$NOTIFY_SOCKET. Fake: ``SdNotify({})``, the same class without a socket (every call a
no-op that says it was not delivered); tests that read what was sent give it a socket
of their own (tests/test_notify.py).
"""

from __future__ import annotations

from typing import Protocol


class Notifier(Protocol):
    """Readiness, status text, the watchdog. Every call returns whether it was delivered;
    none raises."""

    @property
    def watchdog_interval(self) -> float | None:
        """Seconds between watchdog pings; None: no watchdog."""
        ...

    def ready(self, status: str = "") -> bool: ...

    def status(self, text: str) -> bool: ...

    def watchdog(self) -> bool: ...

    def stopping(self, status: str = "") -> bool: ...
