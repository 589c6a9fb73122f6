"""userData (and vendorData) that is ``#cloud-config``, checked against cloud-init's schema.

A typo in a cloud-config key passes cloud-init silently: the guest boots, the
module never runs and the proxy never becomes healthy. So every load of the
fleet repo (``validate``, ``plan``, ``apply``, the daemon) checks each userData and
vendorData whose first line is ``#cloud-config`` (as cloud-init looks) against
``schemas/cloud-init/schema-cloud-config-v1.json``, copied unchanged from the
cloud-init of ``CLOUD_INIT_VERSION`` (its README says where from, which license).
A script, jinja, MIME or ``#include`` is passed on unchecked.

The text is read as cloud-init reads it, YAML 1.1 (``yes`` is a boolean), with
each ``${secret:NAME}`` replaced by a placeholder first: the check never sees
a secret's value. On top of the schema, whose top level accepts any key, a key
that no cloud-init module or base setting knows is reported with the nearest
known one, since that is the typo that costs an evening.

One load checks at most ``ExpandLimits.max_cloud_config_bytes`` of distinct
texts, and their YAML values count against the load's value budget
(reconciler.core.load.expansion): a ProxySet of 1,000 with ``${proxy.name}`` in
a 1 MiB file would otherwise be 1,000 distinct texts, half a CPU-second each.

Problems point at the manifest line (the block's line + the line inside it,
reconciler.core.load.userdata) and field (``spec.cloudInit.userData`` or
``vendorData``), and never quote a value: cloud-config holds passwords and keys.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from importlib import resources
from typing import Any, Final

from jsonschema import Draft4Validator, ValidationError

from reconciler.core.load import userdata
from reconciler.core.load.expansion import Budget, size
from reconciler.core.load.loadmemo import LoadMemo
from reconciler.core.load.reading import ProxyReading, UserDataSource
from reconciler.core.load.schemacheck import suggest
from reconciler.core.load.yamlload import (
    FieldPath,
    OverBudget,
    ValueBudget,
    format_path,
    load_documents,
)
from reconciler.errors import Problem
from reconciler.model.secrets import references

CLOUD_INIT_VERSION: Final = "22.4.2"
"""The cloud-init whose schema is shipped (Debian 12's cloud-init 22.4.2-1+deb12u4)."""
SCHEMA_FILE: Final = ("schemas", "cloud-init", "schema-cloud-config-v1.json")
HEADER: Final = "#cloud-config"

BASE_KEYS: Final = frozenset(
    {
        # Settings cloud-init itself reads from any cloud-config (cloud.cfg's keys), which
        # no module schema of this version lists.
        "merge_how",
        "merge_type",
        "output",
        "log_cfgs",
        "def_log_file",
        "syslog_fix_perms",
        "datasource",
        "datasource_list",
        "system_info",
        "network",
        "manual_cache_clean",
        "vendor_data2",
        "launch-index",
    }
)


@cache
def _schema() -> dict[str, Any]:
    text = resources.files("reconciler").joinpath(*SCHEMA_FILE).read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


@cache
def _validator() -> Draft4Validator:
    return Draft4Validator(_schema())


_PLAIN_MODULE = frozenset({"type", "properties", "additionalProperties", "description"})


@cache
def _modules_of_keys() -> dict[str, tuple[int, ...]] | None:
    """For each top-level key, the ``allOf`` entries (module schemas) that name it.

    The schema is an ``allOf`` of module schemas, each only ``type: object`` and
    ``properties``: one whose properties a config does not use accepts it as is.
    So a config is checked against the modules naming its keys alone, with the very
    same errors, in a fraction of the time (about 5 ms a text for all 56). None
    when a module says more than that: then every text is checked against all.
    """
    schema = _schema()
    owners: dict[str, list[int]] = {}
    for index, entry in enumerate(schema.get("allOf", [])):
        ref = entry.get("$ref", "") if isinstance(entry, dict) else ""
        module = schema["$defs"].get(ref.removeprefix("#/$defs/"), {})
        if len(entry) != 1 or not ref.startswith("#/$defs/") or set(module) - _PLAIN_MODULE:
            return None
        if (
            module.get("type", "object") != "object"
            or module.get("additionalProperties", True) is not True
        ):
            return None
        for key in module.get("properties", {}):
            owners.setdefault(key, []).append(index)
    return {key: tuple(found) for key, found in owners.items()}


def _validator_for(modules: tuple[int, ...]) -> Draft4Validator:
    """cloud-init's schema cut to ``modules``, built for each config checked: keeping it
    saved about 0.05 ms of the 1 ms a distinct cloud-config's check takes (and the
    engine's ``LoadMemo`` already keeps each text's findings; docs/performance.md)."""
    schema = _schema()
    entries = schema["allOf"]
    return Draft4Validator({**schema, "allOf": [entries[i] for i in modules]})


def _schema_errors(config: dict[str, Any]) -> Iterator[ValidationError]:
    """cloud-init's schema errors of a (mapping) config: see ``_modules_of_keys``."""
    owners = _modules_of_keys()
    if owners is None:
        yield from _validator().iter_errors(config)
        return
    modules = sorted({i for key in config for i in owners.get(str(key), ())})
    yield from _validator_for(tuple(modules)).iter_errors(config)


@cache
def known_keys() -> frozenset[str]:
    """Every top-level key a module schema or cloud-init's base settings know."""
    schema = _schema()
    found: set[str] = set(BASE_KEYS)

    def collect(node: Any) -> None:
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/$defs/"):
            collect(schema["$defs"].get(ref.removeprefix("#/$defs/")))
        found.update(node.get("properties", {}))
        for key in ("allOf", "anyOf", "oneOf"):
            for sub in node.get(key, []):
                collect(sub)

    collect(schema)
    return frozenset(found)


def is_cloud_config(text: str) -> bool:
    return text.startswith(HEADER) and text[len(HEADER) : len(HEADER) + 1] in ("", "\n", "\r", " ")


def check(
    proxy: ProxyReading,
    lines: Mapping[str, Sequence[str]],
    *,
    budget: Budget | None = None,
    memo: LoadMemo | None = None,
) -> list[Problem]:
    """Problems of the proxy's userData as a cloud-config ([] when it is not one);
    ``lines``: every file's lines by path (the manifest's, or the userData file's);
    ``budget``: the load's, charged with the text (once) and its YAML values."""
    if proxy.user_data is None or proxy.source is None:
        return []
    return check_text(proxy.user_data, proxy.source, lines, budget=budget, memo=memo)


def check_text(
    text: str,
    source: UserDataSource,
    lines: Mapping[str, Sequence[str]],
    *,
    budget: Budget | None = None,
    memo: LoadMemo | None = None,
) -> list[Problem]:
    """``check`` for ``text`` written at ``source`` (vendorData: ``userdata.vendor_source``);
    ``memo``: where the findings of earlier loads are kept (none: a fresh one)."""
    if not is_cloud_config(text):
        return []
    if budget is not None and budget.exhausted:
        return []  # said once, at the text or manifest where it ran out
    checked = _placeholders(text)
    if budget is not None:
        key = _key(checked)
        limit = budget.limits.max_cloud_config_bytes
        if not budget.take_cloud_config(key, len(checked.encode("utf-8"))):
            return [userdata.field_problem(source, _TOO_MUCH.format(limit=size(limit)))]
    result = findings(checked, budget.values if budget is not None else None, memo=memo)
    if result is None:
        limit = budget.limits.max_values if budget is not None else 0
        return [userdata.field_problem(source, _TOO_DENSE.format(limit=limit))]

    def where(line: int) -> int:
        return userdata.problem(source, lines, line, "").line

    found = set()
    for line, message in result:
        # "(first at line 4)": a line of the cloud-config, said as the file's line.
        message = _LINE.sub(lambda m: f"line {where(int(m[1]))}", message)
        found.add(userdata.problem(source, lines, line, message))
    return sorted(found, key=_order)


def _order(problem: Problem) -> tuple[int, int, str, str]:
    return (problem.line, problem.column, problem.field, problem.message)


def _placeholders(text: str) -> str:
    """``text`` with each ``${secret:NAME}`` replaced by a plain, value-free word."""
    out, last = [], 0
    for ref in references(text):
        out.append(text[last : ref.offset])
        out.append(f"secret-placeholder-{len(out)}")
        last = text.index("}", ref.offset) + 1
    out.append(text[last:])
    return "".join(out)


Finding = tuple[int, str]
"""A problem as (line of the cloud-config, 1-based; message)."""

_TOO_MUCH = (
    "the distinct cloud-configs of this load exceed the limit of {limit} in total (each "
    "ProxySet member whose userData uses ${{proxy.name}} is its own text); not checked"
)
_TOO_DENSE = (
    "the manifests and cloud-configs of this load hold more than {limit} YAML values in "
    "total; this cloud-config was not checked"
)


def _key(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def findings(
    text: str, budget: ValueBudget | None = None, *, memo: LoadMemo | None = None
) -> tuple[Finding, ...] | None:
    """The problems of one cloud-config text, remembered in ``memo`` by the text's sha256.

    Parsing and checking one takes 20-30 ms (pure-Python YAML, an 86 KB schema);
    the daemon loads the same userData every cycle, so its engine's memo checks
    each distinct text once. The text here carries placeholders, never values.
    Its YAML values are charged to ``budget`` (from the memo too, so a load's
    verdict does not depend on what an earlier load saw); None once it ran out.
    """
    counted = ValueBudget(budget.limit - budget.used if budget is not None else 1 << 62)

    def compute() -> tuple[tuple[Finding, ...], int]:
        return tuple(_check_text(text, counted)), counted.used

    try:
        found, used = (memo or LoadMemo(1)).cloud_configs.get(_key(text), compute)
    except OverBudget:
        if budget is not None:
            budget.charge(counted.used)
        return None
    if budget is not None and not budget.charge(used):
        return None
    return found


def _check_text(text: str, budget: ValueBudget | None = None) -> Iterator[Finding]:
    parsed, yaml_problems = load_documents(text, "user-data", version=(1, 1), budget=budget)
    for problem in yaml_problems:
        message = problem.message.removeprefix("invalid YAML: ")
        yield problem.line, f"cloud-config is not valid YAML: {message}"
    if yaml_problems or not parsed:
        return
    config = parsed[0]
    if not isinstance(config.data, dict):
        yield config.start.line, "cloud-config must be a mapping of cloud-init keys"
        return
    known = known_keys()
    for key in config.data:
        if key not in known:
            best = suggest(str(key), known)
            hint = f"did you mean '{best}'?" if best else "see cloud-init's module reference"
            message = (
                f"cloud-config: unknown key {_shown(key)} ({hint}); "
                f"cloud-init {CLOUD_INIT_VERSION} would ignore it"
            )
            yield config.key_mark((key,)).line, message
    for found in _schema_errors(config.data):
        error = _closest(found)
        path: FieldPath = tuple(error.absolute_path)
        where = format_path(path) or "(top level)"
        line = config.value_mark(path).line if path else config.start.line
        yield line, f"cloud-config: {where}: {_describe(error)}"


_LINE = re.compile(r"\bline (\d+)")
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_-]{1,32}")


def _shown(key: object) -> str:
    """An unknown key as an error may quote it: a short plain word (a typo of a cloud-init
    key, worth showing for its "did you mean"), else nothing of userData's text."""
    text = str(key)
    if _PLAIN_KEY.fullmatch(text):
        return f"'{text}'"
    return "(a key that is not a plain word, not shown)"


_TYPES = {
    "object": "a mapping",
    "array": "a list",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}


def _closest(error: ValidationError) -> ValidationError:
    """For an anyOf/oneOf, the failure of the branch that came closest.

    A branch that got past the value's own type failed deeper in it: that is
    the one the operator meant (``users[0]`` is a mapping, so its problem is a
    field of the mapping, not "expected a string").
    """
    while error.validator in ("anyOf", "oneOf") and error.context:
        depth = len(error.absolute_path)
        deeper = [e for e in error.context if len(e.absolute_path) > depth]
        typed = [e for e in error.context if e.validator != "type"]
        pool = deeper or typed
        if not pool:  # every branch wants another type: said at once by _describe
            return error
        error = max(pool, key=lambda e: len(e.absolute_path))
    return error


def _describe(error: ValidationError) -> str:
    """What is wrong, in the schema's words, never quoting the value (it may be secret)."""
    value = error.validator_value
    if error.validator in ("anyOf", "oneOf") and error.context:
        value = [t for e in error.context for t in _listed(e.validator_value)]
        return f"expected {_expected(value)}, got {_kind(error.instance)}"
    if error.validator == "type":
        return f"expected {_expected(value)}, got {_kind(error.instance)}"
    if error.validator == "enum" and isinstance(value, list):
        return f"must be one of {', '.join(str(v) for v in value)}"
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = (
            sorted(error.schema.get("properties", {})) if isinstance(error.schema, dict) else []
        )
        extra = sorted(_shown(k) for k in error.instance if k not in allowed)
        return f"unknown key(s) {', '.join(extra)}; allowed: {', '.join(allowed)}"
    if error.validator == "required" and isinstance(value, list):
        missing = [
            str(v) for v in value if isinstance(error.instance, dict) and v not in error.instance
        ]
        return f"missing required key(s) {', '.join(missing)}"
    rule = f"{error.validator}: {_short(value)}"
    return f"does not match cloud-init {CLOUD_INIT_VERSION}'s schema ({rule})"


def _listed(value: object) -> list[object]:
    return list(value) if isinstance(value, list) else [value]


def _expected(types: object) -> str:
    names = dict.fromkeys(_TYPES.get(str(t), str(t)) for t in _listed(types))
    return " or ".join(names)


def _short(value: object) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(instance: object) -> str:
    if isinstance(instance, bool):
        return "a boolean"
    if isinstance(instance, int | float):
        return "a number"
    if isinstance(instance, str):
        return "a string"
    if isinstance(instance, dict):
        return "a mapping"
    if isinstance(instance, list):
        return "a list"
    return "nothing (null)"
