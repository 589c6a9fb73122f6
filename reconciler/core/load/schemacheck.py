"""JSON-Schema validation of YAML documents, errors pinned to file and line.

The schemas in ``schemas/`` are the only statement of the manifests' shape:
this module loads them, runs jsonschema (draft 2020-12) over a document's
plain values and turns each validation error into a ``Problem`` at the line
and column of the offending node, in words an operator can act on. A schema
may carry ``x-message`` next to a ``pattern`` (or on a field whose type needs
explaining); it replaces the generic wording.

The validator is the one walk over a document that looks at every value: two
rules JSON Schema leaves out ride along in its type checks instead of a walk
of their own. A number must be finite (YAML writes ``.inf`` and ``.nan``, which
slip past ``minimum``/``maximum``: every comparison with NaN is False), and an
integer is written without a point (JSON Schema counts ``2.0`` as an integer;
it would reach the model, and a domain's XML, as ``2.0``).

A time field (``*Seconds``) carries ``"x-duration": true`` and takes a number of
seconds or a duration string (``30s``, ``10m``, ``1h30m``: ``durations``); the
keyword holds a string to the pattern and to the field's own ``minimum``,
``maximum`` and ``exclusiveMinimum`` (which JSON Schema applies to numbers only),
and to whole seconds where the field is an integer.

The daemon config (``DAEMON``) and the inventory JSON (``INVENTORY``) go through
the same ``check``: one wording, one way of pinning an error to its line, for
every file proxyfleet reads. Their loaders add only what a schema cannot say.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from functools import cache
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.protocols import Validator
from referencing import Registry, Resource

from reconciler.core.load import durations
from reconciler.core.load.yamlload import Document, FieldPath, Mark, format_path
from reconciler.errors import Problem

SCHEMA_FILES = {
    "Fleet": "fleet.schema.json",
    "Proxy": "proxy.schema.json",
    "ProxySet": "proxyset.schema.json",
}
"""Schema file of each manifest kind, in the ``schemas/`` directory shipped with the package."""
DAEMON = "Daemon"
"""The daemon config's schema (not a manifest kind: a fleet repo cannot hold one)."""
INVENTORY = "Inventory"
"""The inventory JSON's schema (``inventory --json``, ``plan --inventory``)."""
_FILES = {**SCHEMA_FILES, DAEMON: "daemon.schema.json", INVENTORY: "inventory.schema.json"}

SECRET_FIELDS: tuple[FieldPath, ...] = (
    ("spec", "cloudInit"),
    ("spec", "proxyDefaults", "cloudInit"),
)
"""Fields whose values may carry secrets (passwords in userData): an error below one of
them names the field and the kind of value, never the value itself."""

_TYPE_NAMES = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean (true or false)",
    "object": "a mapping",
    "array": "a list",
    "null": "nothing",
}


_NO_FINAL_NEWLINE = "(?!\\n)"
"""Ends every anchored pattern of the schemas: Python's ``$`` also matches before a final
newline, so ``^[a-z]+$`` alone would take ``"web\\n"``, which reaches domain names."""

MISSING = "required field is missing"
NOT_FINITE = "must be a finite number (.inf and .nan are not accepted)"


@cache
def schema(kind: str) -> dict[str, Any]:
    """The parsed JSON Schema of a manifest kind (``Fleet``, ``Proxy``), ``DAEMON`` or
    ``INVENTORY``."""
    text = resources.files("reconciler").joinpath("schemas", _FILES[kind]).read_text("utf-8")
    loaded: dict[str, Any] = json.loads(text)
    return loaded


def _finite(instance: object) -> bool:
    return not isinstance(instance, float) or math.isfinite(instance)


def _number(_checker: object, instance: object) -> bool:
    return (
        isinstance(instance, int | float) and not isinstance(instance, bool) and _finite(instance)
    )


def _integer(_checker: object, instance: object) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


def _duration(
    _validator: object, enabled: object, instance: object, schema: dict[str, Any]
) -> Iterator[ValidationError]:
    """``x-duration``: a string given for a time field (see the module docstring)."""
    if not enabled or not isinstance(instance, str):
        return
    try:
        value = durations.seconds(instance)
    except ValueError:
        yield ValidationError(
            f"must be seconds or a duration such as 30s, 10m, 1h or 1h30m (got {instance!r})"
        )
        return
    low, high = schema.get("minimum"), schema.get("maximum")
    above = schema.get("exclusiveMinimum")
    if low is not None and value < low:
        yield ValidationError(f"must be at least {low} s (got {instance!r})")
    if high is not None and value > high:
        yield ValidationError(f"must be at most {high} s (got {instance!r})")
    if above is not None and value <= above:
        yield ValidationError(f"must be more than {above} s (got {instance!r})")
    if "integer" in _strings(schema.get("type")) and not value.is_integer():
        yield ValidationError(f"must be whole seconds (got {instance!r})")


_Validator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    validators={"x-duration": _duration},
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine_many(
        {"number": _number, "integer": _integer}
    ),
)


@cache
def _registry() -> Registry:
    """Every schema by its ``$id``: fleet.yaml's proxyDefaults refers to the Proxy's."""
    resources = [(schema(kind)["$id"], Resource.from_contents(schema(kind))) for kind in _FILES]
    return Registry().with_resources(resources)


@cache
def validator(kind: str) -> Validator:
    """The cached draft 2020-12 validator of ``schema(kind)``, with finite numbers and
    whole integers (see the module docstring)."""
    made: Validator = _Validator(schema(kind), registry=_registry())
    return made


def suggest(word: str, choices: Iterable[str]) -> str | None:
    """The closest of ``choices`` to ``word`` (case-insensitive), if any is close."""
    by_folded = {choice.lower(): choice for choice in choices}
    match = difflib.get_close_matches(word.lower(), list(by_folded), n=1, cutoff=0.6)
    return by_folded[match[0]] if match else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` or ''."""
    best = suggest(word, choices)
    return f" (did you mean '{best}'?)" if best else ""


def check(document: Document, kind: str) -> list[Problem]:
    """Every schema problem of ``document`` validated as ``kind`` (a manifest kind, ``DAEMON``
    or ``INVENTORY``), sorted by line and column."""
    errors = list(validator(kind).iter_errors(document.data))
    # "unknown field 'imgae' (did you mean 'image'?)" already says image is missing.
    suggested: set[FieldPath] = set()
    for error in errors:
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            allowed = _properties(error)
            for key in error.instance:
                best = None if key in allowed else suggest(key, allowed)
                if best:
                    suggested.add((*error.absolute_path, best))
    # A value of the wrong type: its type is the one thing to say about it.
    typed = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
    found: set[Problem] = set()
    for error in errors:
        if error.validator != "type" and tuple(error.absolute_path) in typed:
            continue
        found.update(_problems(error, document, suggested))
    return sorted(found, key=lambda p: (p.line, p.column, p.field, p.message))


def _problem(document: Document, mark: Mark, path: FieldPath, message: str) -> Problem:
    return Problem(document.file, mark.line, mark.column, format_path(path), message)


def _properties(error: ValidationError) -> list[str]:
    sub = error.schema if isinstance(error.schema, dict) else {}
    return sorted(sub.get("properties", {}))


def _problems(
    error: ValidationError, document: Document, suggested: set[FieldPath]
) -> Iterator[Problem]:
    path: FieldPath = tuple(error.absolute_path)
    sub: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}
    hint = sub.get("x-message")
    if error.validator == "not" and isinstance(error.validator_value, dict):
        hint = error.validator_value.get("x-message", hint)
    instance = error.instance
    if "propertyNames" in error.absolute_schema_path:
        child = (*path, str(instance))
        message = f"invalid name: {hint}" if hint else f"invalid name: {error.message}"
        yield _problem(document, document.key_mark(child), child, message)
    elif error.validator == "required" and isinstance(instance, dict):
        for name in _strings(error.validator_value):
            child = (*path, name)
            if name not in instance and child not in suggested:
                mark = document.key_mark(path)
                yield _problem(document, mark, child, MISSING)
    elif error.validator == "additionalProperties" and isinstance(instance, dict):
        allowed = _properties(error)
        for key in instance:
            if key not in allowed:
                child = (*path, key)
                yield _problem(
                    document, document.key_mark(child), child, unknown_field(key, allowed)
                )
    elif error.validator in ("minProperties", "maxProperties"):
        message = hint or error.message
        yield _problem(document, document.key_mark(path), path, message)
    elif not _finite(instance):  # whatever else the field wants, this is what to say
        yield _problem(document, document.value_mark(path), path, NOT_FINITE)
    elif _secret(path):
        message = _describe_secret(error, sub, hint)
        yield _problem(document, document.value_mark(path), path, message)
    else:
        yield _problem(document, document.value_mark(path), path, _describe(error, sub, hint))


def _secret(path: FieldPath) -> bool:
    return any(path[: len(prefix)] == prefix for prefix in SECRET_FIELDS)


def _describe_secret(error: ValidationError, sub: dict[str, Any], hint: str | None) -> str:
    """Like ``_describe``, without the value: it may be a password."""
    got = _kind_of(error.instance, show=False)
    if error.validator == "type":
        if hint:
            return f"{hint} (got {got})"
        expected = " or ".join(_TYPE_NAMES.get(t, t) for t in _strings(error.validator_value))
        return f"expected {expected}, got {got}"
    if error.validator == "not" and hint:
        return hint
    return f"{hint or 'invalid value'} (the value is not shown: this field may hold secrets)"


def unknown_field(key: str, allowed: Sequence[str]) -> str:
    """What to say of the field ``key`` where only ``allowed`` may stand."""
    best = suggest(key, allowed)
    if best:
        return f"unknown field (did you mean '{best}'?)"
    return "unknown field; allowed here: " + ", ".join(allowed)


def _describe(error: ValidationError, sub: dict[str, Any], hint: str | None) -> str:
    instance = error.instance
    value = error.validator_value
    got = _kind_of(instance)
    if error.validator == "type":
        if hint and "pattern" not in sub:
            return f"{hint} (got {got})"
        expected = " or ".join(_TYPE_NAMES.get(t, t) for t in _strings(value))
        return f"expected {expected}, got {got}"
    if error.validator == "pattern":
        if hint:
            return f"{hint} (got {instance!r})"
        # "(?!\n)" only keeps Python's "$" from accepting a final newline: not for the reader
        return f"must match {str(value).removesuffix(_NO_FINAL_NEWLINE)} (got {instance!r})"
    if error.validator == "enum":
        choices = _strings(value)
        suggestion = did_you_mean(str(instance), choices)
        return f"must be one of {', '.join(choices)} (got {instance!r}){suggestion}"
    if error.validator == "const":
        return f"must be {value!r} (got {instance!r})"
    if error.validator == "minimum":
        return f"must be at least {value} (got {instance!r})"
    if error.validator == "maximum":
        return f"must be at most {value} (got {instance!r})"
    if error.validator == "exclusiveMinimum":
        return f"must be greater than {value} (got {instance!r})"
    if error.validator in ("oneOf", "anyOf") and hint:
        return f"{hint} (got {got})"
    return hint or error.message


def _kind_of(instance: object, *, show: bool = True) -> str:
    if isinstance(instance, bool):
        return f"a boolean ({str(instance).lower()})"
    if isinstance(instance, int):
        return f"an integer ({instance})" if show else "an integer"
    if isinstance(instance, float):
        return f"a number ({instance})" if show else "a number"
    if isinstance(instance, str) and not show:
        return "a string (not shown)"
    if isinstance(instance, str):
        shown = instance if len(instance) <= 40 else instance[:37] + "..."
        return f"a string ({shown!r})"
    if isinstance(instance, dict):
        return "a mapping"
    if isinstance(instance, list):
        return "a list"
    return "nothing (null)"


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [str(v) for v in value]
    return []
