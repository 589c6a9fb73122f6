"""``${proxy.name}`` and its kin in userData: the proxy's own values, substituted.

One shared userData (a ``userDataFile``, a ProxySet's template, fleet.yaml's
defaults) serves many proxies; what differs between them is a few words. So
userData may say:

| variable | value |
|---|---|
| ``${proxy.name}`` | ``metadata.name`` (a ProxySet member's: ``<set>-<ordinal>``) |
| ``${proxy.zone}`` | ``spec.placement.zone`` |
| ``${proxy.host}`` | ``spec.placement.host``: pinned proxies only |
| ``${proxy.labels.KEY}`` | the label ``KEY`` |

Nothing else: no expressions, no defaults, no includes. The ``proxy.`` prefix
with a dot cannot be a shell variable (``${HOME}``), nor cloud-init's jinja
(``{{ v1.local_hostname }}``), nor a secret reference (``${secret:NAME}``, left
for ``secretrefs``). ``${proxy.host}`` is refused for a proxy the planner places:
its host is known only after planning, while the userData (and so the digest that
decides whether its VM stays) must be known before; a value that changed with
placement would make the digest flap.

Variables give words, never syntax. A value is refused if it holds a line break
of any kind ``str.splitlines`` knows (``\n``, U+2028 and the rest: cloud-init's
PyYAML breaks lines at them too, so a label could add cloud-config keys, and the
lines errors are reported at would shift) or ``${``. And a substitution is
refused when a ``${secret:NAME}`` reference of the substituted text touches a
value: a reference is resolved only where the unsubstituted text has it, so a
label ``{secret:pw}`` after a ``$`` (or two labels ``$`` and ``{secret:pw}``)
cannot make the seed carry a secret the userData did not name. Labels are free
text otherwise; names, zones and hosts are identifiers by their schemas.

Messages name the variable's line and column, never the text written there:
userData may be anything, and problems reach the status branch.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from reconciler.core.load.schemacheck import did_you_mean
from reconciler.model.secrets import references

PATTERN: Final = re.compile(r"\$\{proxy\.([^}\n]*)\}")
KNOWN: Final = ("name", "zone", "host", "labels.KEY")


@dataclass(frozen=True, slots=True)
class Values:
    """What one proxy's userData may refer to (None: unknown, the schema said why)."""

    name: str | None
    zone: str | None
    host: str | None
    labels: Mapping[str, str]
    where: str
    """The proxy's manifest position (``file:line:column``), for messages."""


@dataclass(frozen=True, slots=True)
class Finding:
    """A problem at a 1-based line and column of the userData text."""

    line: int
    column: int
    message: str


def substitute(text: str, values: Values) -> tuple[str, list[Finding]]:
    """``text`` with every ``${proxy.*}`` replaced, and the problems of those it could not.

    A variable whose value would be part of a secret reference stays as written (with a
    finding), so that the text handed on holds only the references ``text`` holds.
    """
    kept: set[int] = set()
    substituted, spans, problems = _fill(text, values, kept)
    while built := _built_references(substituted, spans) - kept:
        kept |= built
        message = (
            "a ${proxy.*} value would be part of a ${secret:...} reference; variables cannot "
            "make or change a secret reference"
        )
        problems += [(origin, message) for origin in built]
        substituted, spans, _ = _fill(text, values, kept)
    breaks = [index for index, char in enumerate(text) if char == "\n"] if problems else []
    return substituted, [_finding(breaks, offset, message) for offset, message in sorted(problems)]


_Span = tuple[int, int, int]
"""A value put in: its (start, end) in the substituted text, and its variable's offset in
the text as written."""


def _fill(
    text: str, values: Values, kept: set[int]
) -> tuple[str, list[_Span], list[tuple[int, str]]]:
    """``text`` with the variables substituted but those at the offsets ``kept``, and the
    problems found (at offsets into ``text``)."""
    findings: list[tuple[int, str]] = []
    out: list[str] = []
    spans: list[_Span] = []
    last = size = 0
    for match in PATTERN.finditer(text):
        value, problem = _value(match.group(1), values)
        if problem is None and value is not None:
            problem = _syntax(match.group(1), value)
        if problem is not None:
            findings.append((match.start(), problem))
        usable = problem is None and value is not None and match.start() not in kept
        put = value if usable and value is not None else match[0]
        out += (text[last : match.start()], put)
        size += match.start() - last
        if usable:
            spans.append((size, size + len(put), match.start()))
        size += len(put)
        last = match.end()
    out.append(text[last:])
    return "".join(out), spans, findings


def _syntax(variable: str, value: str) -> str | None:
    """Why ``value`` may not stand in userData (None: it may)."""
    if len(f"x{value}x".splitlines()) > 1:
        return f"{_written(variable)}: the value holds a line break; it cannot be substituted"
    if "${" in value:
        return f"{_written(variable)}: the value holds '${{'; it cannot be substituted"
    return None


def _built_references(substituted: str, spans: list[_Span]) -> set[int]:
    """The offsets (as written) of the variables whose values are part of a
    ``${secret:NAME}`` of ``substituted``: an empty value counts when it sits inside one.

    ``spans`` are in order and do not overlap: each reference looks at the few values
    before its end only, so a long text with many of both costs no more than a pass."""
    starts = [start for start, _, _ in spans]
    found: set[int] = set()
    for ref in references(substituted):
        end = substituted.index("}", ref.offset) + 1
        index = bisect.bisect_left(starts, end) - 1
        while index >= 0 and spans[index][1] >= ref.offset:
            start, stop, origin = spans[index]
            if (ref.offset < stop) if stop > start else ref.offset < start:
                found.add(origin)
            index -= 1
    return found


def _finding(breaks: list[int], offset: int, message: str) -> Finding:
    """The finding at character ``offset``; ``breaks``: the offsets of the text's ``\\n``."""
    line = bisect.bisect_left(breaks, offset)
    start = breaks[line - 1] + 1 if line else 0
    return Finding(line + 1, offset - start + 1, message)


def _written(variable: str) -> str:
    """How a known variable is named in messages (only known ones are: the text is the user's)."""
    if variable.startswith("labels."):
        return "${proxy.labels.KEY}"
    return f"${{proxy.{variable}}}"


def _value(variable: str, values: Values) -> tuple[str | None, str | None]:
    """(the value, None), (None, None) when the proxy's own field is broken, or (None,
    the problem)."""
    if variable == "name":
        return values.name, None
    if variable == "zone":
        return values.zone, None
    if variable == "host":
        if values.host is None:
            return None, (
                "${proxy.host} is known only for a pinned proxy (spec.placement.host); the proxy "
                f"at {values.where} is placed by the planner"
            )
        return values.host, None
    if variable.startswith("labels."):
        key = variable.removeprefix("labels.")
        if key not in values.labels:
            known = ", ".join(sorted(values.labels)) or "none"
            hint = did_you_mean(key, values.labels)
            return None, (
                f"${{proxy.labels.KEY}} names a label the proxy at {values.where} does not "
                f"have{hint}; its labels: {known}"
            )
        return values.labels[key], None
    names = [f"proxy.{name}" for name in KNOWN]
    hint = did_you_mean(f"proxy.{variable}", names)
    known = ", ".join(f"${{{name}}}" for name in names)
    return None, f"unknown ${{proxy.*}} variable{hint}; known: {known}"
