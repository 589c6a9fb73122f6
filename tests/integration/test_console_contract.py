"""One contract, two consoles: the same cases against ``FakeConsole`` and ``LibvirtConsole``.

``FakeConsole`` stands in for a VM's serial console in the terminal loop's unit tests, so
what its reads, writes and close do must be what a ``virDomainOpenConsole`` stream does.
Each case runs against both: the real console is a diskless guest's on the libvirtd the
integration fixtures start, reached over the SSH-forwarded socket, whose SeaBIOS prints
"No bootable device" on its serial port every second (tests/integration/
test_host_console.py); the fake's "guest" says the same when the case asks it to.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import libvirt
import pytest
from test_host_console import read_until, serial_only_domain

from reconciler.adapters.hypervisor.console.fakeconsole import FakeConsole
from reconciler.adapters.hypervisor.console.libvirtconsole import open_console
from reconciler.errors import TransientError
from reconciler.ports.console import ConsoleStream

NEEDLE = b"No bootable device"


class Side(Protocol):
    console: ConsoleStream

    def guest_prints(self) -> None:
        """The guest writes ``NEEDLE`` on its serial port (again)."""

    def host_closes(self) -> None:
        """The host ends the console's other end: the VM stops."""


class FakeSide:
    def __init__(self) -> None:
        self.fake = FakeConsole()
        self.console: ConsoleStream = self.fake

    def guest_prints(self) -> None:
        self.fake.emit(b"Booting from Hard Disk...\r\n" + NEEDLE + b".\r\n")

    def host_closes(self) -> None:
        self.fake.hang_up()


class LibvirtSide:
    def __init__(self, conn: Any, name: str, console: ConsoleStream) -> None:
        self.conn, self.name, self.console = conn, name, console

    def guest_prints(self) -> None:
        """SeaBIOS prints it every second by itself."""

    def host_closes(self) -> None:
        self.conn.lookupByName(self.name).destroy()


@pytest.fixture(params=["fake", "libvirt"])
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    if request.param == "fake":
        fake = FakeSide()
        yield fake
        fake.console.close()
        return
    conn = request.getfixturevalue("local_conn")
    adapter = request.getfixturevalue("adapter")
    name = f"pf-it-console-{secrets.token_hex(3)}"
    dom = conn.createXML(serial_only_domain(name), 0)
    try:
        real = LibvirtSide(conn, name, open_console(adapter.session, name))
        try:
            yield real
        finally:
            real.console.close()
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            dom.destroy()


def in_thread(call: Callable[[], object], timeout: float) -> bool:
    """Whether ``call`` returned within ``timeout`` seconds."""
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(timeout)
    return not thread.is_alive()


def drain(console: ConsoleStream) -> None:
    while console.read():
        pass


def test_contract_keys_are_sent_and_what_the_guest_prints_is_read(side: Side) -> None:
    side.console.write(b"\r")
    side.guest_prints()

    assert NEEDLE in read_until(side.console, NEEDLE, timeout=120)


def test_contract_a_read_blocked_in_another_thread_returns_nothing_once_closed(
    side: Side,
) -> None:
    side.guest_prints()
    assert NEEDLE in read_until(side.console, NEEDLE, timeout=120)
    reader = threading.Thread(target=drain, args=(side.console,), daemon=True)
    reader.start()

    side.console.close()
    reader.join(30)

    assert not reader.is_alive(), "a read blocked past close"
    assert side.console.read() == b""


def test_contract_closing_twice_is_fine_and_a_closed_console_refuses_keys(side: Side) -> None:
    side.console.close()
    side.console.close()

    with pytest.raises(TransientError):
        side.console.write(b"\r")
    assert side.console.read() == b""


def test_contract_a_console_the_host_closes_reads_to_its_end_and_then_refuses_keys(
    side: Side,
) -> None:
    side.guest_prints()
    assert NEEDLE in read_until(side.console, NEEDLE, timeout=120)

    side.host_closes()

    assert in_thread(lambda: drain(side.console), timeout=30), "the console never ended"
    assert side.console.read() == b""
    with pytest.raises(TransientError):
        side.console.write(b"\r")
