"""Each default lives in one place, the model: the schemas' ``default`` keywords document it.

The loader leaves out what a manifest does not say, so a field's effective default is
its dataclass default in ``reconciler.model.fleet``; the cross-reference checks read it
from there too (``reading``: the SSH port). The daemon config's loader fills what the
file leaves out from ``DaemonSettings()`` (``reconciler.model.settings``). A schema
``default`` that drifted from the model would tell an operator, and their editor,
something the loader does not do.
"""

from __future__ import annotations

import dataclasses
import re
from enum import Enum
from pathlib import Path
from typing import Any

import pytest

from reconciler.core.load.schemacheck import DAEMON, schema
from reconciler.model.fleet import (
    Amount,
    CloudInit,
    HealthCheck,
    Host,
    Image,
    Lifecycle,
    Overcommit,
    Policy,
    Proxy,
    Rollout,
)
from reconciler.model.settings import (
    ConcurrencySettings,
    CoordinationSettings,
    DaemonSettings,
    DnsSettings,
    ImageSettings,
    ListenSettings,
    LogSettings,
    RepoSettings,
    SshSettings,
    StatusSettings,
    TsigSettings,
)

# (schema kind, JSON path of an object schema) -> the dataclass its properties fill.
OBJECTS: dict[tuple[str, tuple[str, ...]], type] = {
    ("Fleet", ("$defs", "image")): Image,
    ("Fleet", ("$defs", "host")): Host,
    ("Fleet", ("$defs", "policy")): Policy,
    ("Fleet", ("$defs", "policy", "properties", "rollout")): Rollout,
    ("Fleet", ("$defs", "policy", "properties", "overcommit")): Overcommit,
    ("Proxy", ("properties", "spec")): Proxy,
    ("Proxy", ("$defs", "cloudInit")): CloudInit,
    ("Proxy", ("$defs", "health")): HealthCheck,
    ("Proxy", ("$defs", "lifecycle")): Lifecycle,
    (DAEMON, ()): DaemonSettings,
    (DAEMON, ("properties", "repo")): RepoSettings,
    (DAEMON, ("properties", "ssh")): SshSettings,
    (DAEMON, ("properties", "status")): StatusSettings,
    (DAEMON, ("properties", "log")): LogSettings,
    (DAEMON, ("properties", "concurrency")): ConcurrencySettings,
    (DAEMON, ("properties", "images")): ImageSettings,
    (DAEMON, ("properties", "coordination")): CoordinationSettings,
    (DAEMON, ("properties", "dns")): DnsSettings,
    (DAEMON, ("properties", "dns", "properties", "tsig")): TsigSettings,
}
RENAMED = {
    "probeURL": "probe_url",
    "tcgCacheMiB": "tcg_cache_mib",
    "fetchTimeoutSeconds": "fetch_timeout",
    "connectTimeoutSeconds": "connect_timeout",
    "callTimeoutSeconds": "call_timeout",
    "keepaliveIntervalSeconds": "keepalive_interval",
    "replaceTimeoutSeconds": "replace_timeout",
    "deleteWindowSeconds": "delete_window",
    "hungAfterSeconds": "hung_after",
    "ttlSeconds": "ttl",
    "allowFileDirs": "allow_file_dirs",
}


def snake(name: str) -> str:
    return RENAMED.get(name) or re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def plain(value: Any) -> Any:
    if isinstance(value, ListenSettings):
        return f"{value.host}:{value.port}"
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Amount):
        return value.value
    return value


def documented() -> list[tuple[str, str, type, str, Any]]:
    found = []
    for (kind, path), cls in OBJECTS.items():
        node: Any = schema(kind)
        for step in path:
            node = node[step]
        for name, prop in node["properties"].items():
            if "default" in prop and not isinstance(prop["default"], dict):
                found.append((kind, "/".join((*path, name)), cls, name, prop["default"]))
    return found


@pytest.mark.parametrize(("kind", "where", "cls", "name", "default"), documented())
def test_every_default_a_schema_documents_is_the_models_default(
    kind: str, where: str, cls: type, name: str, default: Any
) -> None:
    field = {f.name: f for f in dataclasses.fields(cls)}[snake(name)]
    assert plain(field.default) == default, f"{kind} schema {where}"


def test_the_defaults_checked_include_the_ssh_port_and_every_host_default() -> None:
    host = {name for kind, _, cls, name, _ in documented() if cls is Host}
    assert {"port", "user", "pool", "socket", "domainType", "cpuMode"} <= host
    daemon = {name for kind, _, _, name, _ in documented() if kind == DAEMON}
    assert {"interval", "listen", "stateDir", "ttlSeconds", "branch"} <= daemon
    assert len(documented()) >= 55
