"""Every anchored pattern of the project's schemas refuses a trailing newline.

Python's ``re`` lets ``$`` match before a final ``\\n``, so ``^[a-z]+$`` accepts
``"web\\n"``; the schemas end such patterns in ``(?!\\n)`` (docs/security.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def _patterns(node: object) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                yield value
            yield from _patterns(value)
    elif isinstance(node, list):
        for item in node:
            yield from _patterns(item)


def test_every_anchored_pattern_of_the_project_schemas_refuses_a_trailing_newline() -> None:
    found = 0
    for path in sorted(SCHEMAS.glob("*.json")):
        for pattern in _patterns(json.loads(path.read_text())):
            if pattern.endswith("$"):
                raise AssertionError(f"{path.name}: {pattern!r} accepts a trailing newline")
            if pattern.endswith("$(?!\\n)"):
                found += 1
    assert found >= 20
