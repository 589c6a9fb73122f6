"""fleet.yaml's ``spec.proxyDefaults``, merged into each Proxy and ProxySet document.

The defaults have the shape of a Proxy's ``spec`` (without ``placement.host``: a
pin belongs to one proxy). They are merged into a proxy's spec before its schema
check, on plain values, by these rules (docs/configuration.md says the same):

- a mapping (``placement``, ``cloudInit``, ``health``, ``lifecycle``) merges key by
  key, recursively: a key the proxy writes wins, a key it leaves out comes from the
  defaults;
- any other value (a string, a number, a boolean) is taken whole: the proxy's if it
  writes one, else the default;
- ``cloudInit.userData`` and ``cloudInit.userDataFile`` are one field, the userData's
  source: a proxy that writes either takes neither from the defaults;
- ``metadata`` (name, labels, annotations) has no defaults.

So a proxy that leaves ``placement.image`` to the defaults passes the schema's
"required", and what the proxy writes is checked as it always was. The defaults
are checked once, in fleet.yaml (its schema refers to the Proxy's); defaults that
failed that check are not merged at all (fleet.yaml's errors say why).

The paths filled from the defaults are returned, so that the cross-references of
the defaults' placement are reported once, at fleet.yaml, not again at every proxy
that inherits them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Final

from reconciler.core.load.yamlload import Document, FieldPath

USER_DATA_SOURCES: Final = ("userData", "userDataFile")
"""The keys of ``cloudInit`` that name the userData's source: defaulted as one."""
DEFAULTS_PATH: Final[FieldPath] = ("spec", "proxyDefaults")
"""Where the defaults live in fleet.yaml."""


def apply(document: Document, defaults: Mapping[str, Any]) -> tuple[Document, frozenset[FieldPath]]:
    """``document`` with ``defaults`` merged into its spec, and the paths they filled.

    A document without ``spec`` takes every default (``kind: Proxy`` and a name may be
    all a proxy needs); one whose spec is not a mapping is returned as it is: its
    schema check reports that, and defaults would only hide it.
    """
    data = document.data
    own = data.get("spec", {}) if isinstance(data, dict) else None
    if not defaults or not isinstance(own, dict):
        return document, frozenset()
    filled: set[FieldPath] = set()
    spec = merge(defaults, own, ("spec",), filled)
    return replace(document, data={**data, "spec": spec}), frozenset(filled)


def merge(
    defaults: Mapping[str, Any], own: Mapping[str, Any], path: FieldPath, filled: set[FieldPath]
) -> dict[str, Any]:
    """``own`` over ``defaults`` by the module's rules; ``filled`` collects the paths
    taken from the defaults."""
    merged = dict(own)
    for key, default in defaults.items():
        child = (*path, key)
        one_source = path[-1:] == ("cloudInit",) and key in USER_DATA_SOURCES
        if one_source and any(source in own for source in USER_DATA_SOURCES):
            continue
        if key not in own:
            merged[key] = default
            filled.add(child)
        elif isinstance(default, dict) and isinstance(own[key], dict):
            merged[key] = merge(default, own[key], child, filled)
    return merged


def inherits(filled: frozenset[FieldPath], path: FieldPath) -> bool:
    """Whether the value at ``path`` came from the defaults (it or a parent was filled)."""
    return any(path[: len(done)] == done for done in filled)
