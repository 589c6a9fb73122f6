"""Load and validate the daemon config (/etc/proxyfleet/proxyfleet.yaml).

The file is checked against ``schemas/daemon.schema.json`` by the manifests' machinery
(``schemacheck.check``: the same wording, each error at the line and column of its
value); this module adds what a schema cannot say (``repo`` or ``fleets``, fleet ids
unique). Every problem is reported at once as ``file:line:col: field: message`` in a
ConfigError.
Relative paths in the file are taken relative to the file's directory.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from reconciler.core.load.durations import seconds
from reconciler.core.load.schemacheck import DAEMON, check
from reconciler.core.load.yamlload import Document, FieldPath, format_path, load_documents
from reconciler.errors import ConfigError, Problem
from reconciler.model.settings import (
    ConcurrencySettings,
    CoordinationSettings,
    DaemonSettings,
    DnsPolicy,
    DnsSettings,
    FleetSettings,
    ImageSettings,
    ListenSettings,
    LogSettings,
    RepoSettings,
    SecretSettings,
    SshSettings,
    StatusSettings,
    TsigSettings,
    WebhookSettings,
)

DEFAULT_CONFIG = Path("/etc/proxyfleet/proxyfleet.yaml")
DEFAULTS = DaemonSettings()
"""Every default of the config, as the model states it."""


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
        [*check(doc, DAEMON), *_fleets_problems(doc), *_credential_problems(doc)],
        key=lambda p: (p.line, p.column, p.field),
    )
    if found:
        raise ConfigError("\n".join(str(p) for p in found))
    return _build(doc.data, base)


def _pairs(doc: Mapping[str, Any], key: str) -> Iterator[tuple[str, Any]]:
    group = doc.get(key) or {}
    yield from group.items()


def _path(value: str | None, base: Path) -> Path | None:
    if value is None:
        return None
    p = Path(value)
    return p if p.is_absolute() else (base / p)


def _build(doc: Mapping[str, Any], base: Path) -> DaemonSettings:
    """The settings; what the file leaves out takes the model's default (``DEFAULTS``), the
    one place a default is written (the schema's ``default`` keywords document it)."""
    d = DEFAULTS
    ssh = dict(_pairs(doc, "ssh"))
    listen = doc.get("listen")
    host, port = (d.listen.host, d.listen.port)
    if listen is not None:
        text, _, number = str(listen).rpartition(":")
        host, port = text.strip("[]"), int(number)
    log = dict(_pairs(doc, "log"))
    coordination = dict(_pairs(doc, "coordination"))
    return DaemonSettings(
        repo=_repo(doc.get("repo") or {"url": ""}, base),
        interval=seconds(doc.get("interval", d.interval)),
        jitter=float(doc.get("jitter", d.jitter)),
        ssh=SshSettings(
            key_file=_path(ssh.get("keyFile"), base) or d.ssh.key_file,
            known_hosts_file=_path(ssh.get("knownHostsFile"), base) or d.ssh.known_hosts_file,
            connect_timeout=seconds(ssh.get("connectTimeoutSeconds", d.ssh.connect_timeout)),
            call_timeout=seconds(ssh.get("callTimeoutSeconds", d.ssh.call_timeout)),
            keepalive_interval=seconds(
                ssh.get("keepaliveIntervalSeconds", d.ssh.keepalive_interval)
            ),
            libvirt_transport=str(ssh.get("libvirtTransport", d.ssh.libvirt_transport)),
        ),
        listen=ListenSettings(host=host, port=port),
        webhook=WebhookSettings(
            secret_file=_path(dict(_pairs(doc, "webhook")).get("secretFile"), base)
        ),
        secrets=SecretSettings(
            age_identity_file=_path(dict(_pairs(doc, "secrets")).get("ageIdentityFile"), base)
        ),
        status=_status(doc.get("status") or {}),
        log=LogSettings(
            level=str(log.get("level", d.log.level)), format=str(log.get("format", d.log.format))
        ),
        replace_timeout=seconds(doc.get("replaceTimeoutSeconds", d.replace_timeout)),
        concurrency=ConcurrencySettings(
            per_host=int(dict(_pairs(doc, "concurrency")).get("perHost", d.concurrency.per_host)),
            deletes_per_host=int(
                dict(_pairs(doc, "concurrency")).get(
                    "deletesPerHost", d.concurrency.deletes_per_host
                )
            ),
        ),
        images=_images(dict(_pairs(doc, "images"))),
        fleet=str(doc["fleet"]) if "fleet" in doc else d.fleet,
        delete_window=seconds(doc.get("deleteWindowSeconds", d.delete_window)),
        max_deletes_per_run=int(doc.get("maxDeletesPerRun", d.max_deletes_per_run)),
        hung_after=seconds(doc.get("hungAfterSeconds", d.hung_after)),
        coordination=CoordinationSettings(
            url=str(coordination.get("url", d.coordination.url)),
            ttl=seconds(coordination.get("ttlSeconds", d.coordination.ttl)),
            member=str(coordination.get("member", d.coordination.member)),
        ),
        dns=_dns(doc["dns"], base) if doc.get("dns") else None,
        state_dir=_path(doc.get("stateDir"), base) or d.state_dir,
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
        branch=str(repo.get("branch", DEFAULTS.repo.branch)),
        path=str(repo.get("path", DEFAULTS.repo.path)),
        ssh_key_file=_path(repo.get("sshKeyFile"), base),
        known_hosts_file=_path(repo.get("knownHostsFile"), base),
        verify_commits=bool(repo.get("verifyCommits", DEFAULTS.repo.verify_commits)),
        allowed_signers_file=_path(repo.get("allowedSignersFile"), base),
        fetch_timeout=seconds(repo.get("fetchTimeoutSeconds", DEFAULTS.repo.fetch_timeout)),
        max_file_bytes=int(repo.get("maxFileBytes", DEFAULTS.repo.max_file_bytes)),
        max_repo_bytes=int(repo.get("maxRepoBytes", DEFAULTS.repo.max_repo_bytes)),
        allow_non_fast_forward=bool(
            repo.get("allowNonFastForward", DEFAULTS.repo.allow_non_fast_forward)
        ),
    )


def _status(status: Mapping[str, Any]) -> StatusSettings:
    return StatusSettings(
        enabled=bool(status.get("enabled", DEFAULTS.status.enabled)),
        branch=str(status.get("branch", DEFAULTS.status.branch)),
        path=str(status.get("path", DEFAULTS.status.path)),
        history=int(status.get("history", DEFAULTS.status.history)),
        push_attempts=int(status.get("pushAttempts", DEFAULTS.status.push_attempts)),
    )


def _dns(dns: Mapping[str, Any], base: Path) -> DnsSettings:
    """``dns``: the schema has checked its shape; what it leaves out takes DnsSettings' default."""
    d = DnsSettings(server="", zone="")
    tsig = dns.get("tsig")
    return DnsSettings(
        server=str(dns["server"]),
        zone=str(dns["zone"]),
        tsig=TsigSettings(
            name=str(tsig["name"]),
            algorithm=str(tsig.get("algorithm", "hmac-sha256")),
            secret_file=_path(tsig.get("secretFile"), base),
        )
        if tsig
        else None,
        ttl=seconds(dns.get("ttl", d.ttl)),
        policy=DnsPolicy(dns.get("policy", d.policy.value)),
        timeout=seconds(dns.get("timeout", d.timeout)),
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


def _credential_problems(doc: Document) -> list[Problem]:
    """A repo URL whose credential git could not be handed: it goes to git's line-based
    credential helper protocol (reconciler.adapters.git.credentials); never shown."""
    data = doc.data
    assert isinstance(data, Mapping)
    fleets = data.get("fleets")
    repos: list[tuple[FieldPath, Any]] = [(("repo",), data.get("repo"))]
    if isinstance(fleets, list):
        repos += [(("fleets", i, "repo"), e.get("repo")) for i, e in enumerate(fleets) if e]
    found = []
    for where, repo in repos:
        url = repo.get("url") if isinstance(repo, Mapping) else None
        parts = urlsplit(url) if isinstance(url, str) else None
        if parts is None or parts.scheme not in ("http", "https") or "@" not in parts.netloc:
            continue
        if any(c in unquote(parts.netloc.rpartition("@")[0]) for c in "\r\n\0"):
            path = (*where, "url")
            mark = doc.value_mark(path)
            message = "the URL's credential holds a line break or NUL; git cannot be given it"
            found.append(Problem(doc.file, mark.line, mark.column, format_path(path), message))
    return found


def _images(images: Mapping[str, Any]) -> ImageSettings:
    defaults = DEFAULTS.images
    return ImageSettings(
        allow_file_dirs=tuple(
            Path(str(d)) for d in images.get("allowFileDirs", defaults.allow_file_dirs)
        ),
        max_bytes=int(images.get("maxBytes", defaults.max_bytes)),
    )
