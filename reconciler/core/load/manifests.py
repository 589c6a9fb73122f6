"""Load a fleet repo: every manifest, validated, into one frozen ``Repo``.

``load_repo`` reads every ``*.yaml``/``*.yml`` under the repo root (except
dot-directories such as ``.git`` and ``.proxyfleet/``, and dotfiles such as
``.pre-commit-config.yaml``), checks each document against the JSON Schema of
its kind, then checks what a schema cannot see: names that must be unique,
references from proxies to the fleet's images, machine types, zones and hosts.

Each proxy's userData is checked too: as a cloud-config against cloud-init's
schema (reconciler.core.load.cloudconfig) and for its ``${secret:NAME}`` references,
resolved when ``secrets`` allows (reconciler.core.load.secretrefs).

It never stops at the first problem. Either the whole repo is valid and a
``Repo`` comes back, or ``InvalidInput`` carries every problem found, sorted by
file and line: nothing may act on a half-valid fleet.
"""

from __future__ import annotations

from pathlib import Path

from reconciler.core.load import cloudconfig, crossref, repofiles
from reconciler.core.load.reading import FleetReading, ProxyReading, read_fleet, read_proxy
from reconciler.core.load.repofiles import MANIFEST_SUFFIXES, Reader, ReadLimits
from reconciler.core.load.schemacheck import SCHEMA_FILES, check, did_you_mean
from reconciler.core.load.secretrefs import CHECK_ONLY, SecretAccess, SecretResolver
from reconciler.core.load.yamlload import Document, load_documents
from reconciler.errors import InvalidInput, Problem
from reconciler.model.fleet import Repo
from reconciler.model.secrets import SecretValue

FLEET_FILE = crossref.FLEET_FILE
"""The one file, at the repo root, that holds the ``kind: Fleet`` document."""

DEFAULT_LIMITS = ReadLimits()

__all__ = [
    "FLEET_FILE",
    "MANIFEST_SUFFIXES",
    "ReadLimits",
    "SecretAccess",
    "load_repo",
    "manifest_files",
]


def load_repo(
    root: Path, *, limits: ReadLimits = DEFAULT_LIMITS, secrets: SecretAccess = CHECK_ONLY
) -> Repo:
    """The valid fleet repo under ``root``, or ``InvalidInput`` with every problem.

    Files are read as ``repofiles`` says (regular files only, within ``limits``).
    ``secrets`` says how far secret references are followed: by default their
    files must exist; with a decryptor they are decrypted into the proxies.
    """
    if not root.is_dir():
        raise InvalidInput([Problem(str(root), 0, 0, "", "not a directory")])
    problems: list[Problem] = []
    fleets: list[FleetReading] = []
    proxies: list[ProxyReading] = []
    broken_files: set[str] = set()
    reader = Reader(root, limits)
    lines: dict[str, list[str]] = {}
    for entry in repofiles.walk(root):
        if entry.problem:
            problems.append(Problem(entry.rel, 0, 0, "", entry.problem))
            broken_files.add(entry.rel)
            continue
        documents, found, text = _read(reader, entry.rel)
        lines[entry.rel] = text.splitlines()
        if found:
            broken_files.add(entry.rel)
        problems.extend(found)
        for document in documents:
            problems.extend(_classify(document, fleets, proxies))
    fleet = _pick_fleet(root, fleets, broken_files, problems)
    resolver = SecretResolver(root, reader, secrets)
    resolved: dict[int, tuple[SecretValue, ...]] = {}
    for proxy in proxies:
        problems.extend(cloudconfig.check(proxy, lines[proxy.document.file]))
        found_here, resolved[id(proxy)] = resolver.resolve(proxy, lines[proxy.document.file])
        problems.extend(found_here)
    semantic = list(crossref.check_proxies(proxies, fleet))
    if fleet is not None:
        semantic.extend(crossref.check_fleet(fleet))
    # A field the schema already rejected needs no second, derived complaint.
    rejected = {(p.file, p.field) for p in problems}
    problems.extend(p for p in semantic if (p.file, p.field) not in rejected)
    if problems or fleet is None or fleet.fleet is None:
        raise InvalidInput(sorted(set(problems), key=_order))
    built = sorted(
        (proxy.with_secrets(resolved[id(proxy)]) for proxy in proxies), key=lambda p: p.name
    )
    return Repo(fleet=fleet.fleet, proxies=tuple(built))


def manifest_files(root: Path) -> list[str]:
    """Paths (relative, '/'-separated, sorted) of every manifest file under ``root``."""
    return [entry.rel for entry in repofiles.walk(root) if not entry.problem]


def _order(problem: Problem) -> tuple[str, int, int, str, str]:
    return (problem.file, problem.line, problem.column, problem.field, problem.message)


def _read(reader: Reader, rel: str) -> tuple[tuple[Document, ...], tuple[Problem, ...], str]:
    """The documents of ``rel``, its problems, and its text (for userData's line numbers)."""
    raw = reader.read(rel)
    if isinstance(raw, Problem):
        return (), (raw,), ""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        return (), (Problem(rel, line, column, "", f"not UTF-8 text ({exc.reason})"),), ""
    documents, problems = load_documents(text, rel)
    return documents, problems, text


def _classify(
    document: Document, fleets: list[FleetReading], proxies: list[ProxyReading]
) -> list[Problem]:
    """Schema problems of one document; a Fleet or Proxy one is read into ``fleets`` or
    ``proxies`` (its model built when the schema check passed)."""
    data = document.data
    start = document.start
    if not isinstance(data, dict):
        got = "a list" if isinstance(data, list) else "a scalar"
        message = f"document is not a mapping (got {got}); expected a Fleet or Proxy manifest"
        return [Problem(document.file, start.line, start.column, "", message)]
    kind = data.get("kind")
    if kind is None:
        message = "required field is missing (kind: Fleet or kind: Proxy)"
        return [Problem(document.file, start.line, start.column, "kind", message)]
    if not isinstance(kind, str) or kind not in SCHEMA_FILES:
        mark = document.value_mark(("kind",))
        message = (
            f"unknown kind {kind!r}{did_you_mean(str(kind), SCHEMA_FILES)}; expected Fleet or Proxy"
        )
        return [Problem(document.file, mark.line, mark.column, "kind", message)]
    problems = check(document, kind)
    if kind == "Fleet":
        fleets.append(read_fleet(document, valid=not problems))
    else:
        proxies.append(read_proxy(document, valid=not problems))
    return problems


def _pick_fleet(
    root: Path, fleets: list[FleetReading], broken_files: set[str], problems: list[Problem]
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
        if (root / FLEET_FILE).is_file():
            message = "has no kind: Fleet document"
        elif (root / "fleet.yml").is_file():
            message = "missing: the Fleet must be in fleet.yaml (found fleet.yml; rename it)"
        else:
            message = "missing: the repo root needs a fleet.yaml with kind: Fleet"
        problems.append(Problem(FLEET_FILE, 0, 0, "", message))
    return first
