"""``FakeNotifier``: the notifier seam's fake (reconciler.ports.notifier), for unit tests.

It keeps each call as the datagram ``SdNotify`` would send (``READY=1\\nSTATUS=…``), so a
test reads what systemd would have read; ``listening = False`` makes every call say it
was not delivered, as ``SdNotify`` does when nothing listens on its socket. The contract
it shares with ``SdNotify``: tests/test_notifier_contract.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class FakeNotifier:
    sent: list[str] = field(default_factory=list)
    """The datagrams delivered, oldest first."""
    watchdog_interval: float | None = None
    listening: bool = True

    def ready(self, status: str = "") -> bool:
        return self._send("READY=1", *([f"STATUS={status}"] if status else []))

    def status(self, text: str) -> bool:
        return self._send(f"STATUS={' '.join(text.split())}")

    def watchdog(self) -> bool:
        return self._send("WATCHDOG=1")

    def stopping(self, status: str = "") -> bool:
        return self._send("STOPPING=1", *([f"STATUS={status}"] if status else []))

    def _send(self, *lines: str) -> bool:
        if not self.listening:
            return False
        self.sent.append("\n".join(lines))
        return True
