"""``proxyfleet console``: finding the VM, and the terminal session over a fake console."""

from __future__ import annotations

import os
import pty
import termios
import threading
import time

import pytest

from reconciler.adapters.hypervisor.console.fakeconsole import FakeConsole
from reconciler.cli.console import find_vm, raw_mode, session
from reconciler.model import Domain, DomainState, HostInventory, Inventory, Owner


def owned(
    name: str, proxy: str, *, state: DomainState, created: str, fleet: str = "home"
) -> Domain:
    return Domain(name, state, Owner(fleet, proxy, "d" * 64, created=created))


def test_the_running_vm_created_last_is_chosen_while_a_replace_has_two() -> None:
    inventory = Inventory(
        (
            HostInventory(
                "kvm01",
                True,
                (
                    owned(
                        "pf-home-web-1-aaaa",
                        "web-1",
                        state=DomainState.RUNNING,
                        created="2026-01-01",
                    ),
                    owned(
                        "pf-home-web-1-bbbb",
                        "web-1",
                        state=DomainState.RUNNING,
                        created="2026-02-01",
                    ),
                    owned(
                        "pf-home-web-1-cccc",
                        "web-1",
                        state=DomainState.SHUTOFF,
                        created="2026-03-01",
                    ),
                ),
            ),
        )
    )
    assert find_vm(inventory, fleet="home", proxy="web-1") == ("kvm01", "pf-home-web-1-bbbb")
    assert find_vm(inventory, fleet="home", proxy="web-1", domain="pf-home-web-1-cccc") == (
        "kvm01",
        "pf-home-web-1-cccc",
    )


def test_a_proxy_without_a_vm_names_the_unreachable_hosts_and_ignores_other_fleets() -> None:
    inventory = Inventory(
        (
            HostInventory(
                "kvm01",
                True,
                (owned("pf-lab-web-1-aaaa", "web-1", state=DomainState.RUNNING, created="x",
                       fleet="lab"),
                 Domain("web-1", DomainState.RUNNING)),
            ),
            HostInventory("kvm02", False, error="connection refused"),
        )
    )  # fmt: skip
    found = find_vm(inventory, fleet="home", proxy="web-1")
    assert found == ("no VM of proxy web-1 in fleet home on any reachable host; unreachable: kvm02")


def run_session(console: FakeConsole, keys: bytes) -> tuple[str, bytes]:
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    os.write(stdin_w, keys)
    ended = session(console, stdin=stdin_r, stdout=out_w)
    os.close(out_w)
    out = b""
    while chunk := os.read(out_r, 65536):
        out += chunk
    for fd in (stdin_r, stdin_w, out_r):
        os.close(fd)
    return ended, out


def test_keys_before_ctrl_bracket_reach_the_guest_and_the_rest_does_not() -> None:
    console = FakeConsole(respond=lambda data: b"login: " if b"\r" in data else b"")
    ended, out = run_session(console, b"root\r\x1dnever sent")
    assert ended == "escape"
    assert bytes(console.written) == b"root\r"
    assert console.closed
    assert out in (b"", b"login: ")  # the answer may arrive after the escape


def test_the_end_of_a_piped_input_ends_the_session() -> None:
    console = FakeConsole()
    console.emit(b"boot messages\r\n")
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    os.write(stdin_w, b"\r")
    threading.Timer(0.5, os.close, args=(stdin_w,)).start()
    ended = session(console, stdin=stdin_r, stdout=out_w)
    os.close(out_w)
    assert ended == "end of input"
    assert os.read(out_r, 1024) == b"boot messages\r\n"
    assert bytes(console.written) == b"\r"
    os.close(stdin_r)
    os.close(out_r)


def test_a_console_closed_by_the_host_ends_the_session() -> None:
    console = FakeConsole()
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    console.emit(b"reboot: Power down\r\n")
    threading.Timer(0.3, console.hang_up).start()
    started = time.monotonic()
    ended = session(console, stdin=stdin_r, stdout=out_w)
    assert ended == "closed by the host"
    assert time.monotonic() - started < 5
    assert os.read(out_r, 1024) == b"reboot: Power down\r\n"
    for fd in (stdin_r, stdin_w, out_r, out_w):
        os.close(fd)


def test_a_terminal_is_raw_while_attached_and_restored_after() -> None:
    leader, follower = pty.openpty()
    before = termios.tcgetattr(follower)
    assert before[3] & termios.ICANON and before[3] & termios.ECHO
    seen: list[list[object]] = []
    console = FakeConsole(respond=lambda data: seen.append(termios.tcgetattr(follower)) or b"")

    def type_when_raw() -> None:
        # Typed before raw mode, the line discipline would hold (and Ctrl-C flush) them.
        deadline = time.monotonic() + 10
        while termios.tcgetattr(follower)[3] & termios.ICANON and time.monotonic() < deadline:
            time.sleep(0.01)
        os.write(leader, b"a\x03\x1d")  # Ctrl-C goes to the guest; Ctrl-] ends

    threading.Thread(target=type_when_raw, daemon=True).start()
    ended = session(console, stdin=follower, stdout=follower)
    assert ended == "escape"
    assert bytes(console.written) == b"a\x03"
    (during,) = seen
    assert not during[3] & termios.ICANON and not during[3] & termios.ECHO
    assert not during[3] & termios.ISIG  # Ctrl-C is a key for the guest, not a signal here
    assert termios.tcgetattr(follower) == before
    os.close(leader)
    os.close(follower)


def test_an_enter_typed_while_the_console_connects_reaches_the_guest() -> None:
    leader, follower = pty.openpty()
    os.write(leader, b"\r")  # typed before the session: the terminal is still cooked
    time.sleep(0.1)
    console = FakeConsole()

    def escape_when_raw() -> None:
        deadline = time.monotonic() + 10
        while termios.tcgetattr(follower)[3] & termios.ICANON and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.3)  # the session reads what was waiting first
        os.write(leader, b"\x1d")

    threading.Thread(target=escape_when_raw, daemon=True).start()
    ended = session(console, stdin=follower, stdout=follower)
    assert ended == "escape"
    assert bytes(console.written) == b"\n"  # the cooked terminal made the Enter a newline
    os.close(leader)
    os.close(follower)


def test_raw_mode_leaves_a_pipe_alone() -> None:
    read_end, write_end = os.pipe()
    with raw_mode(read_end):
        pass
    os.close(read_end)
    os.close(write_end)


@pytest.mark.parametrize("command", [["console", "--help"]])
def test_console_help_names_the_escape(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    from reconciler.cli import main

    with pytest.raises(SystemExit):
        main(command)
    out = capsys.readouterr().out
    assert "Ctrl-] ends the session" in out and "``" not in out
