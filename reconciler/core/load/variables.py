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

A value is refused if it holds a line break (it would shift the lines errors are
reported at, and could add cloud-config keys) or ``${`` (a label must not smuggle
in a secret reference). Labels are free text otherwise; names, zones and hosts
are identifiers by their schemas.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from reconciler.core.load.schemacheck import did_you_mean

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
    """``text`` with every ``${proxy.*}`` replaced, and the problems of those it could not."""
    findings: list[Finding] = []

    def one(match: re.Match[str]) -> str:
        value, problem = _value(match.group(1), values)
        if problem is None and value is not None and ("\n" in value or "\r" in value):
            problem = f"{match[0]}: the value holds a line break; it cannot be substituted"
        if problem is None and value is not None and "${" in value:
            problem = f"{match[0]}: the value holds '${{'; it cannot be substituted"
        if problem is not None:
            line = text.count("\n", 0, match.start()) + 1
            column = match.start() - (text.rfind("\n", 0, match.start()) + 1) + 1
            findings.append(Finding(line, column, problem))
        return value if problem is None and value is not None else match[0]

    return PATTERN.sub(one, text), findings


def _value(variable: str, values: Values) -> tuple[str | None, str | None]:
    """(the value, None), (None, None) when the proxy's own field is broken, or (None,
    the problem)."""
    written = f"${{proxy.{variable}}}"
    if variable == "name":
        return values.name, None
    if variable == "zone":
        return values.zone, None
    if variable == "host":
        if values.host is None:
            return None, (
                f"{written} is known only for a pinned proxy (spec.placement.host); the proxy "
                f"at {values.where} is placed by the planner"
            )
        return values.host, None
    if variable.startswith("labels."):
        key = variable.removeprefix("labels.")
        if key not in values.labels:
            known = ", ".join(sorted(values.labels)) or "none"
            hint = did_you_mean(key, values.labels)
            return None, (
                f"{written}: the proxy at {values.where} has no label '{key}'{hint}; "
                f"its labels: {known}"
            )
        return values.labels[key], None
    names = [f"proxy.{name}" for name in KNOWN]
    hint = did_you_mean(f"proxy.{variable}", names)
    known = ", ".join(f"${{{name}}}" for name in names)
    return None, f"unknown variable {written}{hint}; known: {known}"
