"""YAML to plain values, remembering where every node was written.

The fleet repo is validated against JSON Schemas, which speak of plain values
(dicts, lists, strings, numbers); operators need errors that name a file, a
line and a column. This module bridges the two: it composes each document with
ruamel.yaml (round-trip, YAML 1.2), turns the node graph into plain values
itself and records, for every path into the document, where its value and its
key start.

Strings are handed over exactly as YAML defines them: a block scalar keeps its
content, its indentation-stripped lines and its chomping, nothing is re-encoded.
YAML errors (tabs, unterminated strings, duplicate keys, undefined aliases)
become ``Problem`` values instead of exceptions, so one run reports them all.

The text may come from anyone with commit access, so two things are bounded:
nesting depth (``MAX_DEPTH``; ruamel's composer recurses and would end in a
RecursionError) and the number of values a document expands to once aliases
are followed (``MAX_VALUES``; a few hundred bytes of nested aliases otherwise
expand to gigabytes). Past either, the document is dropped with a problem.
Problems never quote a scalar's value (it may be a secret) nor an alias's name.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.composer import Composer, MaxDepthExceededError
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from reconciler.core.load.quietyaml import QuietYaml
from reconciler.errors import Problem

FieldPath = tuple[str | int, ...]
"""A path into a document: mapping keys and list indices, outermost first."""

_TAG = "tag:yaml.org,2002:"

MAX_DEPTH = 64
"""Nesting levels a document may have (a fleet manifest needs about six)."""
MAX_VALUES = 200_000
"""Values one document may expand to, aliases followed (a 1 MiB manifest without aliases
holds at most about that many)."""
_MAX_PATH = 4 * MAX_DEPTH
"""Depth a document may reach through aliases (each alias may add ``MAX_DEPTH``)."""


class ValueBudget:
    """YAML values (nodes, aliases not followed) that several texts may compose together.

    Composing costs about 100 µs per value in pure Python, so one load of the fleet
    repo shares one budget over every manifest and every cloud-config it parses:
    past it, composing stops at the value that crossed it.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @property
    def spent(self) -> bool:
        return self.used > self.limit

    def charge(self, values: int) -> bool:
        """Count ``values`` more (a text composed earlier); False once past the limit."""
        self.used += values
        return not self.spent


class OverBudget(Exception):
    """Composing stopped: the ``ValueBudget`` ran out at ``line``/``column`` (1-based)."""

    def __init__(self, line: int, column: int) -> None:
        self.line = line
        self.column = column
        super().__init__(f"value budget spent at {line}:{column}")


@dataclass(frozen=True, slots=True)
class Mark:
    """A 1-based line and column in a file."""

    line: int
    column: int


@dataclass(frozen=True, slots=True)
class Document:
    """One YAML document as plain values, with the position of every node.

    ``values`` maps a path to where the node at that path starts; ``keys``
    maps a path to where the key that introduced it was written (for ``a.b``,
    the ``b:``). Errors about a whole mapping read better at its key.
    """

    file: str
    data: Any
    start: Mark
    values: Mapping[FieldPath, Mark] = field(default_factory=dict, repr=False)
    keys: Mapping[FieldPath, Mark] = field(default_factory=dict, repr=False)

    def value_mark(self, path: FieldPath) -> Mark:
        """Where the node at ``path`` (or its nearest recorded ancestor) starts."""
        for end in range(len(path), -1, -1):
            mark = self.values.get(path[:end])
            if mark is not None:
                return mark
        return self.start

    def key_mark(self, path: FieldPath) -> Mark:
        """Where the key of ``path`` was written; its value's position otherwise."""
        mark = self.keys.get(path)
        return mark if mark is not None else self.value_mark(path)


def format_path(path: FieldPath) -> str:
    """``("spec", "hosts", 1, "name")`` -> ``spec.hosts[1].name``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def load_documents(
    text: str,
    file: str,
    *,
    max_depth: int = MAX_DEPTH,
    max_values: int = MAX_VALUES,
    version: tuple[int, int] | None = None,
    budget: ValueBudget | None = None,
) -> tuple[tuple[Document, ...], tuple[Problem, ...]]:
    """Every document of ``text`` (a file's content) and every problem found.

    A YAML syntax error ends the stream: the documents before it are returned,
    the rest of the file cannot be read. Empty documents (a bare ``---``) are
    dropped: they say nothing. So is a document nested deeper than
    ``max_depth`` or expanding to more than ``max_values`` values.

    ``version`` (1, 1) reads the text as YAML 1.1 does (``yes``/``on`` are
    booleans), the way cloud-init's PyYAML reads a cloud-config.

    With a ``budget``, every value composed is charged to it; past its limit
    ``OverBudget`` is raised (the caller says which text crossed it).
    """
    yaml = QuietYaml(typ="rt", pure=True)
    yaml.max_depth = max_depth
    if budget is not None:
        yaml.Composer = _counting(budget)
    if version is not None:
        yaml.version = version
    documents: list[Document] = []
    problems: list[Problem] = []
    try:
        for node in yaml.compose_all(io.StringIO(text)):
            if _is_empty(node):
                continue
            builder = _Builder(file, max_values=max_values)
            try:
                data = builder.convert(node, ())
            except _TooLarge as exc:
                problems.append(exc.problem)
                continue
            documents.append(
                Document(
                    file=file,
                    data=data,
                    start=_mark(node),
                    values=builder.values,
                    keys=builder.keys,
                )
            )
            problems.extend(builder.problems)
    except MaxDepthExceededError as exc:
        mark = exc.problem_mark
        line, column = (mark.line + 1, mark.column + 1) if mark is not None else (0, 0)
        message = f"invalid YAML: nested deeper than {max_depth} levels"
        problems.append(Problem(file, line, column, "", message))
    except MarkedYAMLError as exc:
        problems.append(_marked_problem(exc, file))
    except RecursionError:
        # A last line of defence: max_depth should always fire first.
        problems.append(Problem(file, 0, 0, "", "invalid YAML: nested too deeply"))
    except ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        problems.append(
            Problem(file, line, column, "", f"invalid YAML: character U+{char:04X} is not allowed")
        )
    except YAMLError as exc:
        problems.append(Problem(file, 0, 0, "", f"invalid YAML: {exc}"))
    return tuple(documents), tuple(problems)


def _counting(budget: ValueBudget) -> type[Composer]:
    """A composer that charges each value it composes to ``budget``."""

    class CountingComposer(Composer):
        def compose_node(self, parent: Any, index: Any) -> Any:
            if not budget.charge(1):
                mark = self.parser.peek_event().start_mark
                raise OverBudget(mark.line + 1, mark.column + 1)
            return super().compose_node(parent, index)

    return CountingComposer


def _is_empty(node: Node) -> bool:
    return isinstance(node, ScalarNode) and node.tag == _TAG + "null" and node.value in ("", "~")


def _mark(node: Node) -> Mark:
    return Mark(node.start_mark.line + 1, node.start_mark.column + 1)


def _marked_problem(exc: MarkedYAMLError, file: str) -> Problem:
    problem = exc.problem or "syntax error"
    mark = exc.problem_mark or exc.context_mark
    if problem.startswith("found undefined alias"):
        # ruamel quotes the alias's name: text of the user's, userData's when checking one
        problem = "found an alias (*name) with no anchor (&name) of that name before it"
    if "'\\t'" in problem:
        message = "invalid YAML: tab character; YAML indentation must use spaces"
    elif exc.context and "quoted scalar" in exc.context and "end of stream" in problem:
        # Point at the opening quote: the end of the file says nothing useful.
        mark = exc.context_mark or mark
        message = "invalid YAML: unterminated quoted string (no closing quote before the end)"
    elif exc.context:
        message = f"invalid YAML: {exc.context}: {problem}"
    else:
        message = f"invalid YAML: {problem}"
    if mark is None:
        return Problem(file, 0, 0, "", message)
    return Problem(file, mark.line + 1, mark.column + 1, "", message)


class _TooLarge(Exception):
    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        super().__init__(str(problem))


class _Builder:
    """Turns one composed document into plain values and position tables."""

    def __init__(self, file: str, *, max_values: int = MAX_VALUES) -> None:
        self.file = file
        self.values: dict[FieldPath, Mark] = {}
        self.keys: dict[FieldPath, Mark] = {}
        self.problems: list[Problem] = []
        self._active: set[int] = set()
        self._left = max_values
        self._max_values = max_values

    def convert(self, node: Node, path: FieldPath) -> Any:
        self._left -= 1
        if self._left < 0:
            mark = _mark(node)
            message = (
                f"invalid YAML: the document expands to more than {self._max_values} values "
                "(aliases followed); nested aliases are refused"
            )
            raise _TooLarge(Problem(self.file, mark.line, mark.column, "", message))
        if len(path) > _MAX_PATH:
            mark = _mark(node)
            message = "invalid YAML: aliases nest the document too deeply"
            raise _TooLarge(Problem(self.file, mark.line, mark.column, "", message))
        self.values.setdefault(path, _mark(node))
        if id(node) in self._active:
            mark = _mark(node)
            self.problems.append(
                Problem(self.file, mark.line, mark.column, format_path(path), "recursive alias")
            )
            return None
        self._active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
            if isinstance(node, SequenceNode):
                return [self.convert(item, (*path, i)) for i, item in enumerate(node.value)]
            return _scalar(node)
        finally:
            self._active.discard(id(node))

    def _mapping(self, node: MappingNode, path: FieldPath) -> dict[str, Any]:
        result: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        seen: dict[str, Mark] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _TAG + "merge":
                self._merge(value_node, path, merged)
                continue
            key_mark = _mark(key_node)
            if not isinstance(key_node, ScalarNode):
                self.problems.append(
                    Problem(
                        self.file,
                        key_mark.line,
                        key_mark.column,
                        format_path(path),
                        "invalid YAML: a mapping key must be a plain value",
                    )
                )
                continue
            key = str(key_node.value)
            child = (*path, key)
            if key in seen:
                first = seen[key]
                self.problems.append(
                    Problem(
                        self.file,
                        key_mark.line,
                        key_mark.column,
                        format_path(child),
                        f"invalid YAML: duplicate key '{key}' (first at line {first.line})",
                    )
                )
                continue
            seen[key] = key_mark
            self.keys[child] = key_mark
            result[key] = self.convert(value_node, child)
        for key, value in merged.items():
            result.setdefault(key, value)
        return result

    def _merge(self, node: Node, path: FieldPath, into: dict[str, Any]) -> None:
        sources = node.value if isinstance(node, SequenceNode) else [node]
        for source in sources:
            value = self.convert(source, path) if isinstance(source, MappingNode) else None
            if not isinstance(value, dict):
                mark = _mark(source)
                self.problems.append(
                    Problem(
                        self.file,
                        mark.line,
                        mark.column,
                        format_path(path),
                        "invalid YAML: '<<' merges only mappings",
                    )
                )
                continue
            for key, item in value.items():
                into.setdefault(key, item)


def _scalar(node: Node) -> Any:
    """YAML 1.2 core schema (and 1.1's booleans): null, bool, int, float; else text."""
    tag = str(node.tag)
    text = str(node.value)
    if tag == _TAG + "null":
        return None
    if tag == _TAG + "bool":
        return text.lower() in ("true", "yes", "on", "y")
    if tag == _TAG + "int":
        return _int(text)
    if tag == _TAG + "float":
        return _float(text)
    return text


def _int(text: str) -> int | str:
    cleaned = text.replace("_", "")
    sign = -1 if cleaned.startswith("-") else 1
    digits = cleaned.lstrip("+-")
    try:
        if digits.startswith(("0x", "0X")):
            return sign * int(digits[2:], 16)
        if digits.startswith(("0o", "0O")):
            return sign * int(digits[2:], 8)
        if digits.startswith(("0b", "0B")):
            return sign * int(digits[2:], 2)
        return sign * int(digits, 10)
    except ValueError:
        return text


def _float(text: str) -> float | str:
    lowered = text.lower().replace("_", "")
    if lowered in (".inf", "+.inf"):
        return float("inf")
    if lowered == "-.inf":
        return float("-inf")
    if lowered == ".nan":
        return float("nan")
    try:
        return float(lowered)
    except ValueError:
        return text
