"""Where a line of a proxy's userData sits: in its manifest, or in its userData file.

userData written in a manifest is a string inside YAML, usually a block scalar::

    cloudInit:
      userData: |          <- the value's mark (line L)
        #cloud-config      <- userData line 1 = manifest line L + 1
        packages: [squid]  <- userData line 2 = manifest line L + 2

A literal block keeps one manifest line per userData line, so an error found
inside userData (a cloud-config key, a secret reference, a variable) is
reported at the manifest line an operator can jump to. A quoted or plain
one-line string has no such mapping: its errors point at the value itself.

userData read from a ``userDataFile`` is its own file: an error inside it is
reported at that file's line and column (once, however many proxies share it,
when the message is the same for all of them). Variables never hold a line break
(reconciler.core.load.variables), so substituting them moves no line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from reconciler.core.load import proxydefaults
from reconciler.core.load.reading import ProxyReading, UserDataSource
from reconciler.core.load.yamlload import Document, FieldPath, Mark, format_path
from reconciler.errors import Problem

USER_DATA: Final[FieldPath] = ("spec", "cloudInit", "userData")
FIELD: Final = "spec.cloudInit.userData"
VENDOR_DATA: Final[FieldPath] = ("spec", "cloudInit", "vendorData")


def vendor_source(proxy: ProxyReading, fleet: Document | None) -> UserDataSource:
    """Where the proxy's vendorData was written: its manifest, or fleet.yaml's defaults."""
    if fleet is not None and proxydefaults.inherits(proxy.inherited, VENDOR_DATA):
        return UserDataSource(fleet, (*proxydefaults.DEFAULTS_PATH, *VENDOR_DATA[1:]))
    return UserDataSource(proxy.document, VENDOR_DATA)


def manifest_mark(
    document: Document, lines: Sequence[str], line: int, *, path: FieldPath = USER_DATA
) -> Mark:
    """The manifest position of userData line ``line`` (1-based) of the field at ``path``.

    ``lines`` are the manifest file's lines (to tell a block scalar from a
    one-line string by the ``|``/``>`` at the value's mark).
    """
    mark = document.value_mark(path)
    text = lines[mark.line - 1] if 0 < mark.line <= len(lines) else ""
    if text[mark.column - 1 : mark.column] not in ("|", ">"):
        return mark
    target = mark.line + max(line, 1)
    below = lines[target - 1] if target <= len(lines) else ""
    return Mark(target, len(below) - len(below.lstrip(" ")) + 1)


def problem(
    source: UserDataSource,
    lines: Mapping[str, Sequence[str]],
    line: int,
    message: str,
    *,
    column: int = 0,
) -> Problem:
    """A problem at userData line ``line`` (and ``column``, 1-based; 0: the line's first
    character) of ``source``; ``lines`` holds every file's lines by its path."""
    if source.file is not None:
        text = lines.get(source.file, [])
        here = text[line - 1] if 0 < line <= len(text) else ""
        indent = len(here) - len(here.lstrip(" ")) + 1
        return Problem(source.file, line, column or indent, "", message)
    document = source.document
    manifest = lines.get(document.file, [])
    mark = manifest_mark(document, manifest, line, path=source.path)
    start = document.value_mark(source.path)
    if column and mark != start:
        # a block scalar's lines lose the block's indentation (its first line's)
        first = next((s for s in manifest[start.line :] if s.strip()), "")
        mark = Mark(mark.line, len(first) - len(first.lstrip(" ")) + column)
    return Problem(document.file, mark.line, mark.column, format_path(source.path), message)


def field_problem(source: UserDataSource, message: str) -> Problem:
    """A problem about the userData as a whole, at the manifest field that wrote it."""
    mark = source.document.value_mark(source.path)
    return Problem(source.document.file, mark.line, mark.column, format_path(source.path), message)


def line_at(text: str, offset: int) -> int:
    """The 1-based line of character ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1
