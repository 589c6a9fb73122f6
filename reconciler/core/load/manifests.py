"""Load a fleet repo: every manifest, validated, into one frozen ``Repo``.

``load_repo`` reads every ``*.yaml``/``*.yml`` under the repo root (except
dot-directories such as ``.git`` and ``.proxyfleet/``, and dotfiles such as
``.pre-commit-config.yaml``), checks each document against the JSON Schema of
its kind, then checks what a schema cannot see: names that must be unique,
references from proxies to the fleet's images, machine types, zones and hosts.

It never stops at the first problem. Either the whole repo is valid and a
``Repo`` comes back, or ``InvalidInput`` carries every problem found, sorted by
file and line: nothing may act on a half-valid fleet.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reconciler.core.load import crossref, repofiles
from reconciler.core.load.repofiles import MANIFEST_SUFFIXES, Reader, ReadLimits
from reconciler.core.load.schemacheck import SCHEMA_FILES, check, did_you_mean
from reconciler.core.load.yamlload import Document, FieldPath, load_documents
from reconciler.errors import InvalidInput, Problem
from reconciler.model.fleet import (
    Amount,
    CloudInit,
    DomainType,
    DriftMode,
    Firmware,
    Fleet,
    Health,
    Host,
    HostNetwork,
    Image,
    ImageFormat,
    Lifecycle,
    Location,
    MachineType,
    Overcommit,
    Placement,
    Policy,
    Proxy,
    Repo,
    Rollout,
)

FLEET_FILE = crossref.FLEET_FILE
"""The one file, at the repo root, that holds the ``kind: Fleet`` document."""

DEFAULT_LIMITS = ReadLimits()

__all__ = ["FLEET_FILE", "MANIFEST_SUFFIXES", "ReadLimits", "load_repo", "manifest_files"]


@dataclass(frozen=True, slots=True)
class _Loaded:
    """A Fleet or Proxy document (schema-valid or not), kept with its positions."""

    kind: str
    document: Document


def load_repo(root: Path, *, limits: ReadLimits = DEFAULT_LIMITS) -> Repo:
    """The valid fleet repo under ``root``, or ``InvalidInput`` with every problem.

    Files are read as ``repofiles`` says (regular files only, within ``limits``).
    """
    if not root.is_dir():
        raise InvalidInput([Problem(str(root), 0, 0, "", "not a directory")])
    problems: list[Problem] = []
    loaded: list[_Loaded] = []
    broken_files: set[str] = set()
    reader = Reader(root, limits)
    for entry in repofiles.walk(root):
        if entry.problem:
            problems.append(Problem(entry.rel, 0, 0, "", entry.problem))
            broken_files.add(entry.rel)
            continue
        documents, found = _read(reader, entry.rel)
        if found:
            broken_files.add(entry.rel)
        problems.extend(found)
        for document in documents:
            problems.extend(_classify(document, loaded))
    fleet_item = _pick_fleet(root, loaded, broken_files, problems)
    proxy_docs = [item.document for item in loaded if item.kind == "Proxy"]
    names = crossref.fleet_names(fleet_item.document) if fleet_item else None
    semantic = list(crossref.check_proxies(proxy_docs, names))
    if fleet_item is not None:
        semantic.extend(crossref.check_fleet(fleet_item.document))
    # A field the schema already rejected needs no second, derived complaint.
    rejected = {(p.file, p.field) for p in problems}
    problems.extend(p for p in semantic if (p.file, p.field) not in rejected)
    if problems or fleet_item is None:
        raise InvalidInput(sorted(set(problems), key=_order))
    proxies = sorted((_proxy(doc) for doc in proxy_docs), key=lambda proxy: proxy.name)
    return Repo(fleet=_fleet(fleet_item.document), proxies=tuple(proxies))


def manifest_files(root: Path) -> list[str]:
    """Paths (relative, '/'-separated, sorted) of every manifest file under ``root``."""
    return [entry.rel for entry in repofiles.walk(root) if not entry.problem]


def _order(problem: Problem) -> tuple[str, int, int, str, str]:
    return (problem.file, problem.line, problem.column, problem.field, problem.message)


def _read(reader: Reader, rel: str) -> tuple[tuple[Document, ...], tuple[Problem, ...]]:
    raw = reader.read(rel)
    if isinstance(raw, Problem):
        return (), (raw,)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        return (), (Problem(rel, line, column, "", f"not UTF-8 text ({exc.reason})"),)
    return load_documents(text, rel)


def _classify(document: Document, loaded: list[_Loaded]) -> list[Problem]:
    """Schema problems of one document; a Fleet or Proxy one is appended to ``loaded``."""
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
    loaded.append(_Loaded(kind, document))
    return problems


def _pick_fleet(
    root: Path, loaded: list[_Loaded], broken_files: set[str], problems: list[Problem]
) -> _Loaded | None:
    """The Fleet of the repo (valid or not), reporting misplaced, second and missing ones."""
    fleets = [item for item in loaded if item.kind == "Fleet"]
    fleets.sort(key=lambda item: (item.document.file != FLEET_FILE, item.document.file))
    first = fleets[0] if fleets and fleets[0].document.file == FLEET_FILE else None
    for item in fleets:
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


def _location(document: Document) -> Location:
    return Location(document.file, document.start.line, document.start.column)


def _fleet(document: Document) -> Fleet:
    spec: dict[str, Any] = document.data.get("spec", {})
    images = tuple(
        _image(key, value, document) for key, value in sorted(spec.get("images", {}).items())
    )
    machine_types = tuple(
        MachineType(
            key=key,
            vcpus=value["vcpus"],
            memory_mib=value["memoryMiB"],
            disk_gib=value["diskGiB"],
        )
        for key, value in sorted(spec.get("machineTypes", {}).items())
    )
    hosts = tuple(
        _host(value, document, ("spec", "hosts", index))
        for index, value in enumerate(spec.get("hosts", []))
    )
    return Fleet(
        name=document.data["metadata"]["name"],
        images=images,
        machine_types=machine_types,
        hosts=hosts,
        policy=_policy(spec.get("policy", {})),
        location=_location(document),
    )


def _image(key: str, value: dict[str, Any], document: Document) -> Image:
    options: dict[str, Any] = {}
    if "sha256" in value:
        options["sha256"] = value["sha256"].lower()
    if "format" in value:
        options["format"] = ImageFormat(value["format"])
    if "firmware" in value:
        options["firmware"] = Firmware(value["firmware"])
    mark = document.value_mark(("spec", "images", key, "url"))
    location = Location(document.file, mark.line, mark.column)
    return Image(key=key, url=value["url"], location=location, **options)


def _host(value: dict[str, Any], document: Document, path: FieldPath) -> Host:
    ((kind, name),) = value["network"].items()
    options: dict[str, Any] = {}
    for field_name, key in (
        ("port", "port"),
        ("user", "user"),
        ("pool", "pool"),
        ("socket", "socket"),
        ("cpu_mode", "cpuMode"),
        ("tcg_cache_mib", "tcgCacheMiB"),
        ("max_proxies", "maxProxies"),
    ):
        if key in value:
            options[field_name] = value[key]
    if "domainType" in value:
        options["domain_type"] = DomainType(value["domainType"])
    mark = document.value_mark(path)
    return Host(
        name=value["name"],
        address=value["address"],
        zone=value["zone"],
        network=HostNetwork(kind=kind, name=name),
        location=Location(document.file, mark.line, mark.column),
        **options,
    )


def _policy(value: dict[str, Any]) -> Policy:
    defaults = Policy()
    return Policy(
        prune=value.get("prune", defaults.prune),
        max_deletes_per_run=value.get("maxDeletesPerRun", defaults.max_deletes_per_run),
        allow_empty=value.get("allowEmpty", defaults.allow_empty),
        drift=DriftMode(value.get("drift", defaults.drift.value)),
        suspend=value.get("suspend", defaults.suspend),
        rollout=_rollout(value.get("rollout", {})),
        overcommit=_overcommit(value.get("overcommit", {})),
        max_shrink_percent=value.get("maxShrinkPercent", defaults.max_shrink_percent),
        acknowledge_shrink_to=value.get("acknowledgeShrinkTo"),
    )


def _overcommit(value: dict[str, Any]) -> Overcommit:
    defaults = Overcommit()
    return Overcommit(
        memory=float(value.get("memory", defaults.memory)),
        cpu=float(value.get("cpu", defaults.cpu)),
        disk=float(value.get("disk", defaults.disk)),
    )


def _amount(value: int | str) -> Amount:
    if isinstance(value, str):
        return Amount(int(value.removesuffix("%")), percent=True)
    return Amount(value)


def _rollout(value: dict[str, Any]) -> Rollout:
    defaults = Rollout()
    surge = value.get("maxSurge")
    unavailable = value.get("maxUnavailable")
    return Rollout(
        max_surge=_amount(surge) if surge is not None else defaults.max_surge,
        max_unavailable=_amount(unavailable)
        if unavailable is not None
        else defaults.max_unavailable,
    )


def _proxy(document: Document) -> Proxy:
    data: dict[str, Any] = document.data
    spec: dict[str, Any] = data["spec"]
    placement = spec["placement"]
    cloud = spec.get("cloudInit", {})
    health = spec.get("health", {})
    default_health = Health()
    labels = data["metadata"].get("labels", {})
    annotations = data["metadata"].get("annotations", {})
    return Proxy(
        name=data["metadata"]["name"],
        placement=Placement(
            zone=placement["zone"],
            image=placement["image"],
            machine_type=placement["machineType"],
            host=placement.get("host"),
        ),
        cloud_init=CloudInit(
            user_data=cloud.get("userData", ""),
            vendor_data=cloud.get("vendorData"),
            network_config=cloud.get("networkConfig"),
        ),
        install_guest_agent=spec.get("installGuestAgent", True),
        health=Health(
            proxy_port=health.get("proxyPort", default_health.proxy_port),
            probe_url=health.get("probeURL", default_health.probe_url),
            expect_status=health.get("expectStatus", default_health.expect_status),
            timeout_seconds=float(health.get("timeoutSeconds", default_health.timeout_seconds)),
            replace_after_seconds=float(
                health.get("replaceAfterSeconds", default_health.replace_after_seconds)
            ),
            max_restarts=health.get("maxRestarts", default_health.max_restarts),
            restart_window_seconds=float(
                health.get("restartWindowSeconds", default_health.restart_window_seconds)
            ),
        ),
        lifecycle=Lifecycle(protect=spec.get("lifecycle", {}).get("protect", False)),
        labels=tuple(sorted(labels.items())),
        annotations=tuple(sorted(annotations.items())),
        location=_location(document),
    )
