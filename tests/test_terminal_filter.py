"""``proxyfleet console`` shows a guest's output as text: no control sequence reaches the
operator's (root's) terminal unless ``--raw`` asks for them."""

from __future__ import annotations

import os

import pytest

from reconciler.adapters.hypervisor.console.fakeconsole import FakeConsole
from reconciler.cli import build_parser
from reconciler.cli.console import session
from reconciler.cli.terminalfilter import MAX_STRING, TerminalFilter

HOSTILE = {
    "osc-52-clipboard": b"\x1b]52;c;ZWNobyBwd25lZA==\x07",
    "osc-title-st": b"\x1b]0;owned title\x1b\\",
    "title-report-query": b"\x1b[21t",
    "reset": b"\x1bc",
    "csi-colour": b"\x1b[1;31m",
    "dcs-string": b"\x1bPq#0;2;0;0;0\x1b\\",
    "c1-csi": "\u009b2J".encode(),
    "c1-osc": "\u009d0;title\u009c".encode(),
    "bell-and-nul": b"\x07\x00\x7f",
    "apc": b"\x1b_hidden\x1b\\",
    "charset": b"\x1b(0",
}


def shown(*chunks: bytes) -> bytes:
    terminal = TerminalFilter()
    return b"".join(terminal.feed(chunk) for chunk in chunks)


@pytest.mark.parametrize("sequence", HOSTILE.values(), ids=list(HOSTILE))
def test_a_control_sequence_is_dropped_whole_and_the_text_around_it_kept(sequence: bytes) -> None:
    assert shown(b"before " + sequence + b" after\r\n") == b"before  after\r\n"


@pytest.mark.parametrize("sequence", HOSTILE.values(), ids=list(HOSTILE))
def test_a_sequence_split_across_reads_is_dropped_as_well(sequence: bytes) -> None:
    data = b"a" + sequence + b"b"
    for cut in range(1, len(data)):
        assert shown(data[:cut], data[cut:]) == b"ab", cut


def test_text_utf8_tabs_and_line_editing_pass_unchanged() -> None:
    text = "login: root\r\nPassword:\t\r\nDebian GNU/Linux 13 — ÄÖ 日本\r\nab\b \b\r\n".encode()
    assert shown(text) == text


def test_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    assert shown(b"a\xffb") == "a\ufffdb".encode()
    # a lone 8-bit CSI byte never reaches the terminal as one
    assert shown(b"\x9b2J") == "\ufffd2J".encode()


def test_an_unterminated_string_hides_a_bounded_amount_only() -> None:
    out = shown(b"\x1b]0;" + b"x" * MAX_STRING, b"visible again")
    assert out.endswith(b"visible again")
    assert len(out) <= len(b"visible again") + 8


def run(console: FakeConsole, *, raw: bool) -> bytes:
    stdin_r, stdin_w = os.pipe()
    out_r, out_w = os.pipe()
    os.close(stdin_w)  # no input: the session ends once the output is copied
    console.hang_up()
    session(console, stdin=stdin_r, stdout=out_w, raw=raw)
    os.close(out_w)
    out = b""
    while chunk := os.read(out_r, 65536):
        out += chunk
    for fd in (stdin_r, out_r):
        os.close(fd)
    return out


def test_the_console_session_filters_what_the_guest_prints() -> None:
    console = FakeConsole()
    console.emit(b"\x1b]52;c;cm0gLXJmIC8=\x07[  OK  ] \x1b[32mStarted\x1b[0m squid\r\n")
    assert run(console, raw=False) == b"[  OK  ] Started squid\r\n"


def test_raw_passes_the_guests_bytes_unchanged() -> None:
    console = FakeConsole()
    console.emit(b"\x1b[32mgreen\x1b[0m\r\n")
    assert run(console, raw=True) == b"\x1b[32mgreen\x1b[0m\r\n"


def test_console_takes_a_raw_flag_off_by_default() -> None:
    parser = build_parser()
    assert parser.parse_args(["console", "web-1"]).raw is False
    assert parser.parse_args(["console", "web-1", "--raw"]).raw is True
