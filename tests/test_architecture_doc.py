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
