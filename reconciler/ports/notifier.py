"""The notifier seam: the service manager (systemd's sd_notify).

Real: ``SdNotify`` (reconciler.adapters.surface.notify), one datagram per call over
$NOTIFY_SOCKET. Fake: ``FakeNotifier`` (reconciler.adapters.surface.fakenotifier), which
keeps each call as the datagram ``SdNotify`` would send. Contract:
tests/test_notifier_contract.py (``SdNotify`` over a real datagram socket).
``SdNotify({})`` is not a second fake but the real class as a daemon not run by systemd
has it (no socket: every call a no-op that says it was not delivered); tests that need
no notifier use it as the daemon would, and tests of the protocol itself give
``SdNotify`` a socket of their own (tests/test_notify.py).
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
