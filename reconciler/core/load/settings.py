"""Load and validate the daemon config (/etc/proxyfleet/proxyfleet.yaml).

The file is checked against ``schemas/daemon.schema.json``; every problem is
reported at once as ``file:line:col: field: message`` in a ConfigError.
Relative paths in the file are taken relative to the file's directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator, ValidationError

from reconciler.core.load import durations
from reconciler.core.load.schemacheck import did_you_mean
from reconciler.core.load.yamlload import Document, FieldPath, format_path, load_documents
from reconciler.errors import ConfigError, Problem
from reconciler.model.settings import (
    ConcurrencySettings,
    CoordinationSettings,
    DaemonSettings,
    FleetSettings,
    ImageSettings,
    ListenSettings,
    LogSettings,
    RepoSettings,
    SshSettings,
    StatusSettings,
    WebhookSettings,
)

DEFAULT_CONFIG = Path("/etc/proxyfleet/proxyfleet.yaml")
SCHEMA_FILE = "daemon.schema.json"


@cache
def _validator() -> Draft202012Validator:
    text = resources.files("reconciler").joinpath("schemas", SCHEMA_FILE).read_text("utf-8")
    return Draft202012Validator(json.loads(text))


def load_settings(path: Path = DEFAULT_CONFIG) -> DaemonSettings:
    """Read, validate and convert the config; raise ConfigError listing every problem."""
    name = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{name}:0:0: cannot read the config: {exc.strerror}") from exc
    return parse_settings(text, name=name, base=path.parent)


def parse_settings(text: str, *, name: str, base: Path) -> DaemonSettings:
    """Validate ``text`` (the file ``name``) and build DaemonSettings."""
    documents, problems = load_documents(text, name)
    if problems:
        raise ConfigError("\n".join(str(p) for p in problems))
    if len(documents) != 1 or not isinstance(documents[0].data, Mapping):
        raise ConfigError(str(Problem(name, 1, 1, "", "the config must be one YAML mapping")))
    doc = documents[0]
    found = sorted(
        [
            *(_problem(doc, err) for err in _validator().iter_errors(doc.data)),
            *_fleets_problems(doc),
        ],
        key=lambda p: (p.line, p.column, p.field),
    )
    if found:
        raise ConfigError("\n".join(str(p) for p in found))
    return _build(doc.data, base)


def _problem(doc: Document, err: ValidationError) -> Problem:
    path: FieldPath = tuple(err.absolute_path)
    mark = doc.key_mark(path)
    message = err.message
    if err.validator == "additionalProperties" and isinstance(err.instance, Mapping):
        known = sorted(err.schema.get("properties", {})) if isinstance(err.schema, Mapping) else []
        extra = sorted(set(err.instance) - set(known))
        if extra:
            path = (*path, extra[0])
            mark = doc.key_mark(path)
            message = f"unknown field{did_you_mean(extra[0], known)}; known: {', '.join(known)}"
    elif err.validator == "pattern" and path == ("listen",):
        message = f"{err.instance!r} is not host:port (for example 127.0.0.1:9477)"
    elif err.validator == "oneOf" and isinstance(err.schema, Mapping) and "x-message" in err.schema:
        message = f"{err.schema['x-message']} (got {err.instance!r})"
    elif err.validator == "required":
        message = f"missing required field {err.message.split(' ')[0]}"
    return Problem(doc.file, mark.line, mark.column, format_path(path), message)


def _pairs(doc: Mapping[str, Any], key: str) -> Iterator[tuple[str, Any]]:
    group = doc.get(key) or {}
    yield from group.items()


def _path(value: str | None, base: Path) -> Path | None:
    if value is None:
        return None
    p = Path(value)
    return p if p.is_absolute() else (base / p)


def _build(doc: Mapping[str, Any], base: Path) -> DaemonSettings:
    ssh = dict(_pairs(doc, "ssh"))
    defaults = SshSettings()
    host, _, port = str(doc.get("listen", "127.0.0.1:9477")).rpartition(":")
    log = dict(_pairs(doc, "log"))
    coordination = dict(_pairs(doc, "coordination"))
    return DaemonSettings(
        repo=_repo(doc.get("repo") or {"url": ""}, base),
        interval=durations.seconds(doc.get("interval", 300)),
        jitter=float(doc.get("jitter", 0.1)),
        ssh=SshSettings(
            key_file=_path(ssh.get("keyFile"), base) or defaults.key_file,
            known_hosts_file=_path(ssh.get("knownHostsFile"), base) or defaults.known_hosts_file,
            connect_timeout=float(ssh.get("connectTimeoutSeconds", defaults.connect_timeout)),
            call_timeout=float(ssh.get("callTimeoutSeconds", defaults.call_timeout)),
            keepalive_interval=float(
                ssh.get("keepaliveIntervalSeconds", defaults.keepalive_interval)
            ),
        ),
        listen=ListenSettings(host=host.strip("[]"), port=int(port)),
        webhook=WebhookSettings(
            secret_file=_path(dict(_pairs(doc, "webhook")).get("secretFile"), base)
        ),
        status=_status(doc.get("status") or {}),
        log=LogSettings(
            level=str(log.get("level", "info")), format=str(log.get("format", "logfmt"))
        ),
        replace_timeout=float(doc.get("replaceTimeoutSeconds", 600)),
        concurrency=ConcurrencySettings(
            per_host=int(dict(_pairs(doc, "concurrency")).get("perHost", 4))
        ),
        images=_images(dict(_pairs(doc, "images"))),
        fleet=str(doc["fleet"]) if "fleet" in doc else None,
        delete_window=float(doc.get("deleteWindowSeconds", 3600)),
        coordination=CoordinationSettings(
            url=str(coordination.get("url", "")),
            ttl=float(coordination.get("ttlSeconds", 20)),
            member=str(coordination.get("member", "")),
        ),
        state_dir=_path(doc.get("stateDir"), base) or Path("/var/lib/proxyfleet"),
        fleets=tuple(
            FleetSettings(
                fleet=str(entry["fleet"]),
                repo=_repo(entry["repo"], base),
                status=_status(entry.get("status") or {}),
            )
            for entry in doc.get("fleets") or ()
        ),
    )


def _repo(repo: Mapping[str, Any], base: Path) -> RepoSettings:
    url = str(repo["url"])
    if url.startswith("."):
        url = str((base / url).resolve())
    return RepoSettings(
        url=url,
        branch=str(repo.get("branch", "main")),
        path=str(repo.get("path", ".")),
        ssh_key_file=_path(repo.get("sshKeyFile"), base),
        known_hosts_file=_path(repo.get("knownHostsFile"), base),
        verify_commits=bool(repo.get("verifyCommits", False)),
        allowed_signers_file=_path(repo.get("allowedSignersFile"), base),
        fetch_timeout=float(repo.get("fetchTimeoutSeconds", 120)),
        max_file_bytes=int(repo.get("maxFileBytes", 1024 * 1024)),
        max_repo_bytes=int(repo.get("maxRepoBytes", 64 * 1024 * 1024)),
        allow_non_fast_forward=bool(repo.get("allowNonFastForward", False)),
    )


def _status(status: Mapping[str, Any]) -> StatusSettings:
    return StatusSettings(
        enabled=bool(status.get("enabled", True)),
        branch=str(status.get("branch", "proxyfleet-status")),
        path=str(status.get("path", ".proxyfleet")),
        history=int(status.get("history", 10)),
        push_attempts=int(status.get("pushAttempts", 3)),
    )


def _fleets_problems(doc: Document) -> list[Problem]:
    """What the schema cannot say: ``repo`` or ``fleets`` (one of them), fleet ids unique."""
    data = doc.data
    assert isinstance(data, Mapping)
    fleets = data.get("fleets")
    if fleets is None:
        if "repo" in data:
            return []
        return [Problem(doc.file, 1, 1, "", "missing required field 'repo' (or 'fleets')")]
    found = []
    for key in ("repo", "fleet", "status"):
        if key in data:
            mark = doc.key_mark((key,))
            message = "not allowed beside 'fleets': give each fleet its own under fleets[]"
            found.append(Problem(doc.file, mark.line, mark.column, key, message))
    seen: set[str] = set()
    for i, entry in enumerate(fleets if isinstance(fleets, list) else []):
        name = entry.get("fleet") if isinstance(entry, Mapping) else None
        if isinstance(name, str) and name in seen:
            mark = doc.key_mark(("fleets", i, "fleet"))
            path = format_path(("fleets", i, "fleet"))
            found.append(
                Problem(doc.file, mark.line, mark.column, path, f"fleet {name!r} is listed twice")
            )
        if isinstance(name, str):
            seen.add(name)
    return found


def _images(images: Mapping[str, Any]) -> ImageSettings:
    defaults = ImageSettings()
    return ImageSettings(
        allow_file_dirs=tuple(Path(str(d)) for d in images.get("allowFileDirs", [])),
        max_bytes=int(images.get("maxBytes", defaults.max_bytes)),
    )
