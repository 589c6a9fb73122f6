"""What a guest's serial console may show on the operator's terminal: text, no control.

``proxyfleet console`` runs as root on the management box, and whatever the
guest prints reaches root's terminal. A guest is not trusted (anyone who can
commit userData decides what it runs), and terminal control sequences do more
than colour text: OSC 52 writes the clipboard, OSC 0 the window title, DCS
strings reach the terminal's own parsers, some emulators answer queries by
typing into the shell (``ESC [ 21 t`` reports the title), and ``ESC c``
resets it. So the guest's output is filtered, keeping:

- printable text (UTF-8; bytes that are not UTF-8 become U+FFFD);
- ``\\r``, ``\\n``, ``\\t`` and ``\\b`` (a shell's line editing echoes backspace; it
  moves the cursor one cell left and does nothing ``\\r`` could not);

and dropping every other C0 and C1 control and each whole escape sequence
(``ESC`` + one character, ``CSI ... final``, and the strings OSC, DCS, SOS, PM
and APC up to their terminator), so that colours and cursor moves vanish
without leaving their parameters behind. A sequence may span reads: the
filter keeps its state between them. A string left open is dropped for at most
``MAX_STRING`` characters; then the text after it shows again (a guest cannot
hide everything it prints later behind one unterminated OSC).

``proxyfleet console --raw`` skips the filter, for full-screen programs on a
guest the operator trusts.
"""

from __future__ import annotations

import codecs
import enum
from typing import Final

MAX_STRING: Final = 4096
"""Characters an unterminated OSC/DCS/... string may swallow before text shows again."""
MAX_CSI: Final = 64
"""Parameter and intermediate characters a CSI sequence may have; past them it is dropped
as broken and what follows is text."""

KEPT_CONTROLS: Final = frozenset("\r\n\t\b")
_ESC = "\x1b"
_BEL = "\x07"
_ST = "\x9c"
_CSI_C1 = "\x9b"
_STRING_C1 = frozenset("\x90\x98\x9d\x9e\x9f")  # DCS, SOS, OSC, PM, APC
_STRING_AFTER_ESC = frozenset("PX]^_")  # DCS, SOS, OSC, PM, APC after ESC


class _State(enum.Enum):
    TEXT = enum.auto()
    ESCAPE = enum.auto()
    INTERMEDIATE = enum.auto()
    CSI = enum.auto()
    STRING = enum.auto()
    STRING_ESCAPE = enum.auto()


class TerminalFilter:
    """Feeds bytes of console output; returns what may reach a terminal (module docstring)."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._state = _State.TEXT
        self._length = 0

    def feed(self, data: bytes) -> bytes:
        """The printable part of ``data``; a sequence cut by the end of ``data`` is kept
        in mind for the next call."""
        out: list[str] = []
        for char in self._decoder.decode(data):
            while (kept := self._step(char)) is _AGAIN:
                pass
            if kept:
                out.append(char)
        return "".join(out).encode("utf-8")

    def _step(self, char: str) -> bool | object:
        """True: show ``char``; False: drop it; ``_AGAIN``: the state changed and ``char``
        must be looked at again (it ended a sequence without being part of it)."""
        state = self._state
        if state is _State.TEXT:
            return self._text(char)
        if state is _State.ESCAPE:
            return self._after_escape(char)
        if state in (_State.CSI, _State.INTERMEDIATE):
            return self._in_sequence(char)
        if state is _State.STRING_ESCAPE:
            self._state = _State.TEXT if char == "\\" else _State.ESCAPE
            return False if char == "\\" else _AGAIN
        self._length += 1
        if char in (_BEL, _ST) or self._length > MAX_STRING:
            self._state = _State.TEXT
        elif char == _ESC:
            self._state = _State.STRING_ESCAPE
        return False

    def _text(self, char: str) -> bool:
        code = ord(char)
        if char == _ESC:
            self._state = _State.ESCAPE
        elif char == _CSI_C1:
            self._enter(_State.CSI)
        elif char in _STRING_C1:
            self._enter(_State.STRING)
        else:
            return char in KEPT_CONTROLS or not (code < 0x20 or 0x7F <= code <= 0x9F)
        return False

    def _after_escape(self, char: str) -> bool | object:
        if char == "[":
            self._enter(_State.CSI)
        elif char in _STRING_AFTER_ESC:
            self._enter(_State.STRING)
        elif "\x20" <= char <= "\x2f":
            self._enter(_State.INTERMEDIATE)
        elif char == _ESC:
            pass  # ESC ESC: the second one starts the sequence
        elif "\x30" <= char <= "\x7e":
            self._state = _State.TEXT  # a two-character sequence (ESC c, ESC 7, ...)
        else:
            self._state = _State.TEXT
            return _AGAIN
        return False

    def _in_sequence(self, char: str) -> bool | object:
        """CSI: parameters 0x30-0x3F and intermediates 0x20-0x2F up to a final 0x40-0x7E;
        after ESC and an intermediate, more intermediates up to a final 0x30-0x7E."""
        self._length += 1
        lowest_final = "\x40" if self._state is _State.CSI else "\x30"
        if lowest_final <= char <= "\x7e":
            self._state = _State.TEXT
            return False
        if "\x20" <= char <= "\x3f" and self._length <= MAX_CSI:
            return False
        self._state = _State.TEXT  # broken (a control, a non-ASCII character, too long)
        return _AGAIN

    def _enter(self, state: _State) -> None:
        self._state = state
        self._length = 0


_AGAIN: Final = object()
