"""Where a line of a proxy's userData sits in its manifest.

userData is a string inside a YAML manifest, usually a block scalar::

    cloudInit:
      userData: |          <- the value's mark (line L)
        #cloud-config      <- userData line 1 = manifest line L + 1
        packages: [squid]  <- userData line 2 = manifest line L + 2

A literal block keeps one manifest line per userData line, so an error found
inside userData (a cloud-config key, a secret reference) is reported at the
manifest line an operator can jump to. A quoted or plain one-line string has
no such mapping: its errors point at the value itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from reconciler.core.load.yamlload import Document, FieldPath, Mark

USER_DATA: Final[FieldPath] = ("spec", "cloudInit", "userData")
FIELD: Final = "spec.cloudInit.userData"


def manifest_mark(document: Document, lines: Sequence[str], line: int) -> Mark:
    """The manifest position of userData line ``line`` (1-based).

    ``lines`` are the manifest file's lines (to tell a block scalar from a
    one-line string by the ``|``/``>`` at the value's mark).
    """
    mark = document.value_mark(USER_DATA)
    text = lines[mark.line - 1] if 0 < mark.line <= len(lines) else ""
    if text[mark.column - 1 : mark.column] not in ("|", ">"):
        return mark
    target = mark.line + max(line, 1)
    below = lines[target - 1] if target <= len(lines) else ""
    return Mark(target, len(below) - len(below.lstrip(" ")) + 1)


def line_at(text: str, offset: int) -> int:
    """The 1-based line of character ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1
