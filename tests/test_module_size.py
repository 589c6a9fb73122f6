"""Issue 15: no module of the package grows past 400 lines (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "reconciler"
LIMIT = 400


def test_no_module_in_the_reconciler_package_is_over_400_lines() -> None:
    sizes = {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 50, sorted(sizes)
    assert {name: n for name, n in sizes.items() if n > LIMIT} == {}
