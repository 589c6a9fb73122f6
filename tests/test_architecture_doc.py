"""Issue 42: docs/architecture.md names every module of the package, and only modules that exist."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "reconciler"
DOC = ROOT / "docs" / "architecture.md"
ENTRY = re.compile(r"^- `([\w/]+\.py)`: (\S.*)$")
NAMED = re.compile(r"`([\w/.]+\.py)`")


def modules() -> set[str]:
    return {
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py"
    }


def listed() -> dict[str, str]:
    """The 'Every module' section: module -> its one-line purpose."""
    section = DOC.read_text(encoding="utf-8").split("\n## Every module\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    entries: dict[str, str] = {}
    for line in section.splitlines():
        found = ENTRY.match(line)
        if found is not None:
            assert found[1] not in entries, f"{found[1]} is listed twice"
            entries[found[1]] = found[2]
    return entries


def test_every_module_of_the_package_is_listed_with_its_purpose() -> None:
    entries = listed()
    assert len(entries) > 100, sorted(entries)
    assert sorted(modules() - entries.keys()) == []


def test_the_module_list_names_no_module_that_does_not_exist() -> None:
    assert sorted(listed().keys() - modules()) == []


def test_every_python_file_the_page_names_exists() -> None:
    existing = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")}
    missing = []
    for name in set(NAMED.findall(DOC.read_text(encoding="utf-8"))):
        if name.startswith("tests/"):
            found = (ROOT / name).is_file()
        else:
            found = any(module == name or module.endswith(f"/{name}") for module in existing)
        if not found:
            missing.append(name)
    assert sorted(missing) == []


WALK = re.compile(r"^### (.+): (\d+) modules in (\d+) layers$")
ROW = re.compile(r"^\| (\d+) \| `([\w/]+\.py)` \|")


def walks() -> dict[str, tuple[int, int, list[str]]]:
    """Each walk's heading -> (modules it says, layers it says, the modules its table lists)."""
    found: dict[str, tuple[int, int, list[str]]] = {}
    heading = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if (walk := WALK.match(line)) is not None:
            heading = walk[1]
            found[heading] = (int(walk[2]), int(walk[3]), [])
        elif line.startswith("#"):
            heading = None
        elif heading is not None and (row := ROW.match(line)) is not None:
            found[heading][2].append(row[2])
    return found


def test_each_walk_counts_the_modules_and_layers_its_table_lists() -> None:
    found = walks()
    assert len(found) == 2, sorted(found)
    for heading, (count, layers, rows) in found.items():
        assert len(rows) == len(set(rows)) == count, (heading, rows)
        assert len({row.split("/")[0] for row in rows}) == layers, (heading, rows)
        assert all(module in modules() for module in rows), (heading, rows)
