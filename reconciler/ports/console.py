"""The console seam: a byte stream to and from one VM's first serial port.

``LibvirtConsole`` (reconciler.adapters.hypervisor.console.libvirtconsole) is the real thing, a
``virDomainOpenConsole`` stream over the host's forwarded libvirt connection;
``FakeConsole`` (reconciler.adapters.hypervisor.console.fakeconsole) is an in-memory stand-in for
the terminal loop's unit tests and nothing else. Contract:
tests/integration/test_console_contract.py (the fake and a real guest's console). Not the
engine's: ``proxyfleet console`` (reconciler.cli.console) gets one from the composition root
(reconciler.cli.compose).
"""

from __future__ import annotations

from typing import Protocol


class ConsoleStream(Protocol):
    def read(self) -> bytes:
        """The next bytes the guest wrote, blocking until there are some; b"" once the
        console is closed (the VM stopped, another session took it with --force, or
        ``close``). Never raises."""
        ...

    def write(self, data: bytes) -> None:
        """Send ``data`` to the guest as typed keys. Raises TransientError when the
        console is gone."""
        ...

    def close(self) -> None:
        """End the session; a ``read`` blocked in another thread returns b"". Idempotent."""
        ...
