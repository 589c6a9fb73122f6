"""Issue 42: a module holds one concept, within a budget of about 500 lines of code.

What counts is a line of code: a physical line holding a token of a statement.
Blank lines, comments and docstrings (a string standing alone as a statement: a
module's, a class's, a function's or an attribute's) do not, so documenting a
module never pushes it over. The budget is a tripwire, not the rule: split a
module by concept (docs/architecture.md), never to get under it.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "reconciler"
BUDGET = 500
NOT_CODE = {
    tokenize.COMMENT,
    tokenize.NL,
    tokenize.NEWLINE,
    tokenize.INDENT,
    tokenize.DEDENT,
    tokenize.ENCODING,
    tokenize.ENDMARKER,
}


def code_lines(source: str) -> int:
    """The lines of ``source`` that hold code: not blank, not only a comment, not a docstring."""
    docstrings: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            docstrings.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    lines: set[int] = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in NOT_CODE:
            lines.update(range(token.start[0], token.end[0] + 1))
    return len(lines - docstrings)


def test_blank_lines_comments_and_docstrings_are_not_code() -> None:
    source = '''"""A module.

Its docstring runs on.
"""

# a comment
import os  # a trailing comment


class A:
    """A class."""

    x = 1
    """An attribute's docstring."""

    def f(self) -> str:
        """A method."""
        return os.sep + """
a string that is a value"""
'''
    assert code_lines(source) == 6


def test_no_module_of_the_reconciler_package_is_over_its_code_line_budget() -> None:
    sizes = {
        str(path.relative_to(PACKAGE)): code_lines(path.read_text(encoding="utf-8"))
        for path in PACKAGE.rglob("*.py")
    }
    assert len(sizes) > 50, sorted(sizes)
    print("largest:", sorted(sizes.items(), key=lambda item: -item[1])[:5])
    assert {name: n for name, n in sizes.items() if n > BUDGET} == {}
