"""docs/configuration.md documents every field of both schemas, with the schema's default."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "configuration.md"
SECTIONS = {
    "fleet": "## `fleet.yaml` (kind: Fleet)",
    "proxy": "## Proxy manifests (kind: Proxy)",
    "proxyset": "## ProxySet manifests (kind: ProxySet)",
}


def resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """``node`` with its local ``$ref`` followed; a reference to another schema (fleet.yaml's
    proxyDefaults: the Proxy's spec) is documented by a row of its own, not field by field."""
    while "$ref" in node and node["$ref"].startswith("#/"):
        name = node["$ref"].removeprefix("#/$defs/")
        rest = {key: value for key, value in node.items() if key != "$ref"}
        node = {**schema["$defs"][name], **rest}
    return node


def properties(
    schema: dict[str, Any], node: dict[str, Any], path: str = ""
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every property below ``node`` as (doc path, schema); map keys as ``<key>``, items ``[]``."""
    node = resolve(schema, node)
    for name, sub in node.get("properties", {}).items():
        child = f"{path}.{name}" if path else name
        resolved = resolve(schema, sub)
        yield child, resolved
        yield from properties(schema, resolved, child)
    if isinstance(node.get("additionalProperties"), dict):
        yield from properties(schema, node["additionalProperties"], f"{path}.<key>")
    if isinstance(node.get("items"), dict):
        yield from properties(schema, node["items"], f"{path}[]")


def section(kind: str) -> str:
    text = DOC.read_text()
    start = text.index(SECTIONS[kind])
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def rows(kind: str) -> dict[str, list[str]]:
    """Table rows of a kind's section, keyed by the backquoted field in the first cell."""
    found: dict[str, list[str]] = {}
    for line in section(kind).splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            found[cells[0].strip("`")] = cells
    return found


def schema_fields(kind: str) -> list[tuple[str, dict[str, Any]]]:
    schema = json.loads((ROOT / "schemas" / f"{kind}.schema.json").read_text())
    return list(properties(schema, schema))


@pytest.mark.parametrize("kind", sorted(SECTIONS))
def test_every_schema_property_has_a_row_in_the_configuration_doc(kind: str) -> None:
    documented = rows(kind)
    fields = schema_fields(kind)

    missing = [path for path, _ in fields if path not in documented]
    assert fields
    assert missing == []


@pytest.mark.parametrize("kind", sorted(SECTIONS))
def test_the_doc_rows_name_no_field_the_schema_lacks(kind: str) -> None:
    known = {path for path, _ in schema_fields(kind)}

    assert sorted(set(rows(kind)) - known) == []


@pytest.mark.parametrize("kind", sorted(SECTIONS))
def test_every_documented_default_is_the_schema_default(kind: str) -> None:
    documented = rows(kind)
    for path, sub in schema_fields(kind):
        type_cell, default_cell, meaning = documented[path][1:4]
        assert type_cell and meaning, path
        if "default" not in sub:
            continue
        default = sub["default"]
        if isinstance(default, bool):
            expected = "`true`" if default else "`false`"
        elif isinstance(default, dict | list):
            expected = f"`{json.dumps(default)}`"
        elif isinstance(default, str):
            expected = f"`{default or ''''''}`".replace("``", '`""`')
        else:
            expected = f"`{default}`"
        assert default_cell.startswith(expected), path
