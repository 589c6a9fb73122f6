"""Load a fleet repo: every manifest, validated, into one frozen ``Repo``.

``load_repo`` reads every ``*.yaml``/``*.yml`` under the repo root (except
dot-directories such as ``.git`` and ``.proxyfleet/``, and dotfiles such as
``.pre-commit-config.yaml``), checks each document against the JSON Schema of
its kind, then checks what a schema cannot see: names that must be unique,
references from proxies to the fleet's images, machine types, zones and hosts.

The Fleet is read first: its ``spec.proxyDefaults`` merge into every Proxy and
ProxySet before their schema check (reconciler.core.load.proxydefaults), and a
ProxySet stands for ``replicas`` Proxy documents (reconciler.core.load.proxyset).

Each proxy's userData, inline or from its ``userDataFile``, with its ``${proxy.*}``
variables substituted (reconciler.core.load.userdata), is checked too: as a
cloud-config against cloud-init's schema (reconciler.core.load.cloudconfig) and
for its ``${secret:NAME}`` references, resolved when ``secrets`` allows
(reconciler.core.load.secretrefs).

What a repo expands to is bounded as well as what it reads (ReadLimits): a
document with schema problems expands to nothing (a ProxySet's template is still
read once, to be checked), and proxies, YAML values, substituted userData and
cloud-config texts share one budget per load (reconciler.core.load.expansion).
A root without ``fleet.yaml`` is refused before anything is walked: it is not a
fleet repo, and whatever else lies there (a home directory) is not read.

The files come through a ``RepoFiles`` (reconciler.core.load.repofiles): the
loader itself does no I/O. ``reconciler.adapters.repo.diskfiles.load_repo_at``
loads a checkout on disk.

It never stops at the first problem. Either the whole repo is valid and a
``Repo`` comes back, or ``InvalidInput`` carries every problem found, sorted by
file and line: nothing may act on a half-valid fleet.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from reconciler.core.load import (
    cloudconfig,
    crossref,
    expansion,
    fixedaddress,
    proxydefaults,
    proxyset,
    userdata,
)
from reconciler.core.load.expansion import Budget, ExpandLimits
from reconciler.core.load.loadmemo import LoadMemo
from reconciler.core.load.reading import FleetReading, ProxyReading, read_fleet, read_proxy
from reconciler.core.load.repofiles import MANIFEST_SUFFIXES, FileKind, ReadLimits, RepoFiles
from reconciler.core.load.schemacheck import MISSING, SCHEMA_FILES, check, did_you_mean
from reconciler.core.load.secretrefs import CHECK_ONLY, SecretAccess, SecretResolver
from reconciler.core.load.userdata import UserDataFiles
from reconciler.core.load.yamlload import (
    Document,
    FieldPath,
    OverBudget,
    format_path,
    load_documents,
)
from reconciler.errors import InvalidInput, Problem
from reconciler.model.fleet import Repo
from reconciler.model.secrets import SecretValue

FLEET_FILE = crossref.FLEET_FILE
"""The one file, at the repo root, that holds the ``kind: Fleet`` document."""

DEFAULT_LIMITS = ReadLimits()
DEFAULT_EXPAND = ExpandLimits()

__all__ = [
    "FLEET_FILE",
    "MANIFEST_SUFFIXES",
    "ExpandLimits",
    "ReadLimits",
    "RepoFiles",
    "SecretAccess",
    "load_repo",
]


def load_repo(
    files: RepoFiles,
    *,
    secrets: SecretAccess = CHECK_ONLY,
    expand: ExpandLimits = DEFAULT_EXPAND,
    memo: LoadMemo | None = None,
) -> Repo:
    """The valid fleet repo of ``files``, or ``InvalidInput`` with every problem.

    ``files`` hands out regular files only, within its read limits; what they
    expand to is bounded by ``expand``. ``secrets`` says how far secret
    references are followed: by default their files must exist; with a decryptor
    they are decrypted into the proxies. ``memo`` keeps what earlier loads of
    the same repo computed (reconciler.core.load.loadmemo); none: a fresh one.
    """
    if files.kind(FLEET_FILE) is FileKind.MISSING:
        raise InvalidInput([Problem(FLEET_FILE, 0, 0, "", _missing_fleet(files))])
    budget = Budget(expand)
    problems: list[Problem] = []
    fleets: list[FleetReading] = []
    proxies: list[ProxyReading] = []
    pending: list[tuple[Document, str]] = []
    broken_files: set[str] = set()
    lines: dict[str, Sequence[str]] = {}
    # fleet.yaml first: what the budget leaves unread is never the Fleet.
    for entry in sorted(files.walk(), key=lambda e: e.rel != FLEET_FILE):
        if entry.problem:
            problems.append(Problem(entry.rel, 0, 0, "", entry.problem))
            broken_files.add(entry.rel)
            continue
        documents, found, text = _read(files, entry.rel, budget)
        lines[entry.rel] = text.splitlines()
        if found:
            broken_files.add(entry.rel)
        problems.extend(found)
        for document in documents:
            problems.extend(_classify(document, fleets, pending))
        if budget.values.spent:
            break  # _read said so, at the file that crossed it; the rest would say it again
    fleet = _pick_fleet(files, fleets, broken_files, problems)
    # Proxies are read once fleet.yaml is, wherever they sit: its defaults merge into them.
    defaults = _defaults(fleet)
    for document, kind in pending:
        found_here = _read_proxies(document, kind, defaults, proxies, budget=budget)
        if fleet is None and FLEET_FILE in broken_files:
            found_here = _not_for_defaults(found_here)
        problems.extend(found_here)
        if budget.proxies_refused:
            break  # one problem says so; the documents after it are not built
    user_data_files = UserDataFiles(files)
    memo = memo if memo is not None else LoadMemo()
    resolver = SecretResolver(files, secrets, memo)
    resolved: dict[int, tuple[SecretValue, ...]] = {}
    for index, reading in enumerate(proxies):
        proxy, found_here = userdata.resolve(
            reading, fleet.document if fleet else None, user_data_files, lines
        )
        too_much = _hold_user_data(proxy, budget)
        if too_much is not None:
            problems.append(too_much)
            del proxies[index:]  # their userData is not held, not checked
            break
        proxies[index] = proxy
        problems.extend(found_here)
        problems.extend(cloudconfig.check(proxy, lines, budget=budget, memo=memo))
        if proxy.vendor_data is not None:
            vendor = userdata.vendor_source(proxy, fleet.document if fleet else None)
            problems.extend(
                cloudconfig.check_text(proxy.vendor_data, vendor, lines, budget=budget, memo=memo)
            )
        found_here, resolved[id(proxy)] = resolver.resolve(proxy, lines)
        problems.extend(found_here)
    semantic = list(crossref.check_proxies(proxies, fleet))
    semantic.extend(fixedaddress.check(proxies))
    if fleet is not None:
        semantic.extend(crossref.check_fleet(fleet))
    # A field the schema already rejected needs no second, derived complaint.
    rejected = {(p.file, p.field) for p in problems}
    problems.extend(p for p in semantic if (p.file, p.field) not in rejected)
    if problems or fleet is None or fleet.fleet is None:
        raise InvalidInput(sorted(set(problems), key=_order))
    built = sorted(
        (proxy.model(resolved[id(proxy)]) for proxy in proxies if not proxy.template_only),
        key=lambda p: p.name,
    )
    return Repo(fleet=fleet.fleet, proxies=tuple(built))


def _order(problem: Problem) -> tuple[str, int, int, str, str]:
    return (problem.file, problem.line, problem.column, problem.field, problem.message)


def _read(
    files: RepoFiles, rel: str, budget: Budget
) -> tuple[tuple[Document, ...], tuple[Problem, ...], str]:
    """The documents of ``rel``, its problems, and its text (for userData's line numbers)."""
    raw = files.read(rel)
    if isinstance(raw, Problem):
        return (), (raw,), ""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        return (), (Problem(rel, line, column, "", f"not UTF-8 text ({exc.reason})"),), ""
    try:
        documents, problems = load_documents(text, rel, budget=budget.values)
    except OverBudget as exc:
        message = _TOO_DENSE.format(limit=budget.limits.max_values)
        return (), (Problem(rel, exc.line, exc.column, "", message),), text
    return documents, problems, text


_TOO_DENSE = (
    "the manifests hold more than {limit} YAML values in total (the bound of one load); "
    "this file and the ones after it were not read"
)
_TOO_MANY = (
    "the repo's proxies would exceed the limit of {limit} (ProxySet members counted); "
    "this document's and the ones after it were not built"
)
_TOO_MUCH_USER_DATA = (
    "the proxies' userData, variables substituted, exceeds the limit of {limit} in total "
    "(each ProxySet member holds its own copy); the proxies from here on were not checked"
)


def _classify(
    document: Document, fleets: list[FleetReading], pending: list[tuple[Document, str]]
) -> list[Problem]:
    """Problems of one document's kind; a Fleet is checked and read into ``fleets`` (its
    model built when the schema check passed), a Proxy or ProxySet left in ``pending``."""
    data = document.data
    start = document.start
    if not isinstance(data, dict):
        got = "a list" if isinstance(data, list) else "a scalar"
        message = f"document is not a mapping (got {got}); expected a {_KINDS} manifest"
        return [Problem(document.file, start.line, start.column, "", message)]
    kind = data.get("kind")
    if kind is None:
        message = "required field is missing (kind: Fleet, kind: Proxy or kind: ProxySet)"
        return [Problem(document.file, start.line, start.column, "kind", message)]
    if not isinstance(kind, str) or kind not in SCHEMA_FILES:
        mark = document.value_mark(("kind",))
        suggestion = did_you_mean(str(kind), SCHEMA_FILES)
        message = f"unknown kind {kind!r}{suggestion}; expected {_KINDS}"
        return [Problem(document.file, mark.line, mark.column, "kind", message)]
    if kind != "Fleet":
        pending.append((document, kind))
        return []
    problems = check(document, kind)
    fleets.append(read_fleet(document, valid=not problems))
    return problems


_KINDS = "Fleet, Proxy or ProxySet"


def _defaults(fleet: FleetReading | None) -> dict[str, Any]:
    """fleet.yaml's proxyDefaults as written (checked there, and merged even when they
    failed: ``_own`` drops what a proxy would only repeat of their problems)."""
    return fleet.proxy_defaults if fleet is not None else {}


def _not_for_defaults(problems: list[Problem]) -> list[Problem]:
    """``problems`` but the missing fields fleet.yaml's proxyDefaults might have given: it
    could not be read, so a proxy relying on it is not known to lack anything."""
    return [
        p
        for p in problems
        if not (
            p.message == MISSING
            and (p.field == "spec" or p.field.startswith("spec."))
            and p.field != proxyset.REPLICAS
        )
    ]


def _own(problems: list[Problem], inherited: frozenset[FieldPath]) -> list[Problem]:
    """The problems not at a value inherited from the defaults (fleet.yaml reports those)."""
    fields = [format_path(path) for path in inherited]
    return [
        p
        for p in problems
        if not any(p.field == f or p.field.startswith((f + ".", f + "[")) for f in fields)
    ]


def _read_proxies(
    document: Document,
    kind: str,
    defaults: dict[str, Any],
    proxies: list[ProxyReading],
    *,
    budget: Budget,
) -> list[Problem]:
    """Schema problems of a Proxy or ProxySet document, the defaults merged in; its
    proxies are read into ``proxies`` (a valid ProxySet's: one reading per replica,
    counted against ``budget`` before any is built)."""
    if kind == "Proxy":
        if not budget.take_proxies(1):
            return [_too_many(document, (), budget)]
        merged, inherited = proxydefaults.apply(document, defaults)
        found = check(merged, kind)
        proxies.append(read_proxy(merged, valid=not found, inherited=inherited))
        return _own(found, inherited)
    merged, inherited = proxydefaults.apply(proxyset.template(document), defaults)
    # The set's name is checked by its own schema (with room for -<ordinal>).
    found = [p for p in check(merged, "Proxy") if p.field != proxyset.NAME_FIELD]
    found = proxyset.with_replicas([*found, *check(document, kind)])
    metadata = document.data.get("metadata")
    name = metadata.get("name") if isinstance(metadata, dict) else None
    # A set with problems (replicas: 1000000000 among them) expands to nothing: its
    # template alone is read, to be checked, as replicas: 0's is.
    count = 0 if found else proxyset.replicas(document)
    if isinstance(name, str):
        if not budget.take_proxies(max(count, 1)):
            return [_too_many(document, ("spec", "replicas"), budget)]
        for member in proxyset.members(merged, name, max(count, 1)):
            reading = read_proxy(
                member, valid=not found, inherited=inherited, set_name=name, template_only=not count
            )
            proxies.append(reading)
    return sorted(set(_own(found, inherited)), key=_order)


def _hold_user_data(proxy: ProxyReading, budget: Budget) -> Problem | None:
    """None when the proxy's substituted userData fits the budget; else the problem."""
    if proxy.user_data is None or proxy.source is None:
        return None
    if budget.take_user_data(len(proxy.user_data.encode("utf-8"))):
        return None
    limit = expansion.size(budget.limits.max_user_data_bytes)
    return userdata.field_problem(proxy.source, _TOO_MUCH_USER_DATA.format(limit=limit))


def _too_many(document: Document, path: FieldPath, budget: Budget) -> Problem:
    mark = document.value_mark(path)
    message = _TOO_MANY.format(limit=budget.limits.max_proxies)
    return Problem(document.file, mark.line, mark.column, format_path(path), message)


def _pick_fleet(
    files: RepoFiles, fleets: list[FleetReading], broken_files: set[str], problems: list[Problem]
) -> FleetReading | None:
    """The Fleet of the repo (valid or not), reporting misplaced, second and missing ones."""
    ordered = sorted(
        fleets, key=lambda item: (item.document.file != FLEET_FILE, item.document.file)
    )
    first = ordered[0] if ordered and ordered[0].document.file == FLEET_FILE else None
    for item in ordered:
        if item is first:
            continue
        mark = item.document.value_mark(("kind",))
        if first is not None:
            where = f"{FLEET_FILE}:{first.document.start.line}:{first.document.start.column}"
            message = f"second Fleet document (the fleet is defined at {where}); a repo has one"
        else:
            message = f"a Fleet belongs in {FLEET_FILE} at the repo root"
        problems.append(Problem(item.document.file, mark.line, mark.column, "kind", message))
    if first is None and FLEET_FILE not in broken_files:
        message = (
            "has no kind: Fleet document"
            if files.kind(FLEET_FILE) is FileKind.FILE
            else _missing_fleet(files)
        )
        problems.append(Problem(FLEET_FILE, 0, 0, "", message))
    return first


def _missing_fleet(files: RepoFiles) -> str:
    if files.kind("fleet.yml") is FileKind.FILE:
        return "missing: the Fleet must be in fleet.yaml (found fleet.yml; rename it)"
    return "missing: the repo root needs a fleet.yaml with kind: Fleet; nothing else was read"
