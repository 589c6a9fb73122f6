"""``kind: ProxySet``: ``replicas`` proxies from one template.

A ProxySet's spec is a Proxy's spec plus ``replicas``. Its proxies are named
``<set>-0`` ... ``<set>-(replicas-1)`` and carry the set's labels and
annotations; each is read as the Proxy document it stands for (same model, so
the same digest: rewriting Proxy documents as a ProxySet replaces no VM).
Lowering ``replicas`` drops the highest ordinals from the desired set; the
planner then treats their VMs as any proxy whose manifest is gone (``prune``,
``maxDeletesPerRun``, ``maxShrinkPercent``).

The document is checked twice over its own positions: against
``proxyset.schema.json`` (``replicas``, the set's name, no ``placement.host``)
and, as its ``template``, against the Proxy schema, once however many replicas
there are (so ``replicas: 0`` still checks the template); ``with_replicas`` makes
the Proxy schema's word on an unknown spec field name ``replicas`` among what is
allowed. The set spreads over
its zone's hosts by the planner's placement rule (fewest proxies first), which
is why a pin is refused.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Final

from reconciler.core.load.schemacheck import MISSING, schema, suggest, unknown_field
from reconciler.core.load.yamlload import Document
from reconciler.errors import Problem

KIND: Final = "ProxySet"
NAME_FIELD: Final = "metadata.name"


def template(document: Document) -> Document:
    """The set as the Proxy document its members are (named as the set, no ``replicas``)."""
    data = document.data
    assert isinstance(data, dict)
    templated = {**data, "kind": "Proxy"}
    spec = data.get("spec")
    if isinstance(spec, dict):
        templated["spec"] = {key: value for key, value in spec.items() if key != "replicas"}
    return replace(document, data=templated)


REPLICAS: Final = "spec.replicas"
_UNKNOWN: Final = "unknown field"


def with_replicas(found: list[Problem]) -> list[Problem]:
    """``found``, one set's problems (its template's Proxy check and its own), with each
    unknown field of ``spec`` said against the set's fields, ``replicas`` among them; a
    misspelt ``replicas`` is said once, as the typo (not also as a missing field)."""
    allowed = sorted({*schema("Proxy")["properties"]["spec"]["properties"], "replicas"})
    misspelt = False
    said: list[Problem] = []
    for problem in found:
        parent, _, key = problem.field.rpartition(".")
        if parent == "spec" and problem.message.startswith(_UNKNOWN):
            problem = replace(problem, message=unknown_field(key, allowed))
            misspelt = misspelt or suggest(key, allowed) == "replicas"
        said.append(problem)
    return [p for p in said if not (misspelt and p.field == REPLICAS and p.message == MISSING)]


def replicas(document: Document) -> int:
    """``spec.replicas``, 0 when it is not a whole number (the schema check says why)."""
    spec = document.data.get("spec") if isinstance(document.data, dict) else None
    value = spec.get("replicas") if isinstance(spec, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return 0


def member_name(set_name: str, ordinal: int) -> str:
    """The name of the set's proxy number ``ordinal`` (0-based)."""
    return f"{set_name}-{ordinal}"


def members(template_document: Document, set_name: str, count: int) -> list[Document]:
    """The documents of the set's proxies ``0 .. count-1``: the template, renamed."""
    data = template_document.data
    metadata = data.get("metadata") if isinstance(data, dict) else None
    if not isinstance(metadata, dict):
        return []
    return [
        replace(
            template_document,
            data={**data, "metadata": {**metadata, "name": member_name(set_name, ordinal)}},
        )
        for ordinal in range(count)
    ]
