"""JSON to plain values, remembering where every value and key was written.

The JSON twin of ``yamlload``: the inventory file is validated against a JSON
Schema like the manifests, and its errors should name a line and column too.
``json`` gives no positions, so once the text has parsed, a small walk over it
records where each value and each key starts, by path, into a ``Document``
that ``schemacheck``-style error translation understands.

A JSON syntax error becomes a ``Problem`` at its line and column. Positions are
recorded down to ``MAX_DEPTH`` levels; anything deeper is pinned to its nearest
recorded ancestor.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable
from json import decoder
from typing import cast

from reconciler.core.load.yamlload import Document, FieldPath, Mark
from reconciler.errors import Problem

MAX_DEPTH = 64
# json's own string scanner (C when available): (decoded string, index past its quote).
_scanstring = cast(Callable[[str, int], tuple[str, int]], decoder.scanstring)  # type: ignore[attr-defined]
_WHITESPACE = " \t\n\r"


def load_json(text: str, file: str) -> tuple[Document | None, Problem | None]:
    """The document of ``text``, or the problem that stops it from parsing."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, Problem(file, exc.lineno, exc.colno, "", f"not JSON: {exc.msg}")
    except RecursionError:
        return None, Problem(file, 0, 0, "", "not JSON that can be read: nested too deeply")
    walker = _Walker(text)
    start = walker.skip(0)
    walker.value(start, ())
    return (
        Document(
            file=file,
            data=data,
            start=walker.mark(start),
            values=walker.values,
            keys=walker.keys,
        ),
        None,
    )


class _Walker:
    """Walks text that ``json.loads`` accepted, recording positions by path."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = [0] + [i + 1 for i, c in enumerate(text) if c == "\n"]
        self.values: dict[FieldPath, Mark] = {}
        self.keys: dict[FieldPath, Mark] = {}
        self._decoder = json.JSONDecoder()

    def mark(self, index: int) -> Mark:
        line = bisect.bisect_right(self.lines, index)
        return Mark(line, index - self.lines[line - 1] + 1)

    def skip(self, index: int) -> int:
        while index < len(self.text) and self.text[index] in _WHITESPACE:
            index += 1
        return index

    def value(self, index: int, path: FieldPath) -> int:
        """Record the value starting at ``index``; the index just past it."""
        if len(path) > MAX_DEPTH:
            return int(self._decoder.raw_decode(self.text, index)[1])
        self.values[path] = self.mark(index)
        char = self.text[index]
        if char == "{":
            return self._object(index + 1, path)
        if char == "[":
            return self._array(index + 1, path)
        return int(self._decoder.raw_decode(self.text, index)[1])

    def _object(self, index: int, path: FieldPath) -> int:
        index = self.skip(index)
        if self.text[index] == "}":
            return index + 1
        while True:
            key, end = _scanstring(self.text, index + 1)
            self.keys[(*path, key)] = self.mark(index)
            index = self.skip(self.skip(end) + 1)  # past the ':'
            index = self.skip(self.value(index, (*path, key)))
            if self.text[index] == "}":
                return index + 1
            index = self.skip(index + 1)  # past the ','

    def _array(self, index: int, path: FieldPath) -> int:
        index = self.skip(index)
        if self.text[index] == "]":
            return index + 1
        position = 0
        while True:
            index = self.skip(self.value(index, (*path, position)))
            if self.text[index] == "]":
                return index + 1
            index = self.skip(index + 1)
            position += 1
