"""The console adapter against a real libvirtd through a real sshd.

A diskless guest whose SeaBIOS writes to the serial port (``useserial``) and
retries booting every second gives real console output in seconds, with no
image: what the adapter reads is what QEMU's serial port sent through libvirt,
the SSH-forwarded socket and the stream.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from typing import Any

import libvirt
import pytest

from reconciler.adapters.hypervisor.console.libvirtconsole import open_console
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.cli.console import session
from reconciler.errors import NotFoundError, PermanentError


def serial_only_domain(name: str) -> str:
    domain = ET.Element("domain", {"type": "qemu"})
    ET.SubElement(domain, "name").text = name
    ET.SubElement(domain, "memory", {"unit": "MiB"}).text = "64"
    ET.SubElement(domain, "vcpu").text = "1"
    os_el = ET.SubElement(domain, "os")
    ET.SubElement(os_el, "type", {"arch": "x86_64", "machine": "pc"}).text = "hvm"
    ET.SubElement(os_el, "bios", {"useserial": "yes", "rebootTimeout": "1000"})
    devices = ET.SubElement(domain, "devices")
    serial = ET.SubElement(devices, "serial", {"type": "pty"})
    ET.SubElement(serial, "target", {"port": "0"})
    console = ET.SubElement(devices, "console", {"type": "pty"})
    ET.SubElement(console, "target", {"type": "serial", "port": "0"})
    return ET.tostring(domain, encoding="unicode")


@pytest.fixture
def booting(local_conn: Any) -> Iterator[str]:
    """A transient guest that prints SeaBIOS's boot attempts on its serial port forever."""
    name = f"pf-it-console-{secrets.token_hex(3)}"
    dom = local_conn.createXML(serial_only_domain(name), 0)
    try:
        yield name
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            dom.destroy()


def read_until(console: Any, needle: bytes, timeout: float) -> bytes:
    got = bytearray()
    done = threading.Event()

    def pump() -> None:
        while needle not in got and (data := console.read()):
            got.extend(data)
        done.set()

    threading.Thread(target=pump, daemon=True).start()
    done.wait(timeout)
    return bytes(got)


def test_the_console_of_a_guest_reads_its_serial_output_over_the_forwarded_socket(
    adapter: LibvirtHost, booting: str
) -> None:
    console = open_console(adapter.session, booting)
    try:
        console.write(b"\r")
        seen = read_until(console, b"No bootable device", timeout=120)
    finally:
        console.close()
    assert b"SeaBIOS" in seen or b"No bootable device" in seen, seen
    assert b"No bootable device" in seen, seen
    assert console.read() == b""


def test_a_console_in_use_is_refused_without_force_and_taken_over_with_it(
    adapter: LibvirtHost, make_host: Any, booting: str
) -> None:
    first = open_console(adapter.session, booting)
    other = make_host()
    try:
        with pytest.raises(PermanentError, match=r"(?i)active console session"):
            open_console(other.session, booting)
        second = open_console(other.session, booting, force=True)
        try:
            # The first session is closed by libvirt once the second one took over.
            deadline = time.monotonic() + 30
            while first.read():
                assert time.monotonic() < deadline, "the first session was never closed"
            assert b"No bootable device" in read_until(second, b"No bootable device", 120)
        finally:
            second.close()
    finally:
        first.close()


def test_a_domain_the_host_does_not_have_is_not_found(adapter: LibvirtHost) -> None:
    with pytest.raises(NotFoundError, match="no domain pf-it-absent"):
        open_console(adapter.session, "pf-it-absent")


def test_the_session_copies_a_real_console_to_the_terminal_and_ctrl_bracket_ends_it(
    adapter: LibvirtHost, booting: str
) -> None:
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    console = open_console(adapter.session, booting)
    result: list[str] = []
    thread = threading.Thread(
        target=lambda: result.append(session(console, stdin=stdin_r, stdout=out_w))
    )
    thread.start()
    got = bytearray()
    deadline = time.monotonic() + 120
    while b"No bootable device" not in got and time.monotonic() < deadline:
        got.extend(os.read(out_r, 65536))
    os.write(stdin_w, b"\r\x1d")
    thread.join(timeout=30)
    for fd in (stdin_r, stdin_w, out_r, out_w):
        os.close(fd)
    assert b"No bootable device" in got, bytes(got)
    assert result == ["escape"]
