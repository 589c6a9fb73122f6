"""The checks a JSON Schema cannot express: uniqueness and references.

They run on the documents' plain values, even on documents that failed their
schema, so one run reports a typo in fleet.yaml *and* the proxy that points at
a zone nobody defined. Values of the wrong type are simply skipped here: the
schema check has already reported them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, fields
from typing import Any

from reconciler.core import naming
from reconciler.core.load.schemacheck import did_you_mean
from reconciler.core.load.yamlload import Document, FieldPath, format_path
from reconciler.errors import Problem
from reconciler.model.fleet import Host

FLEET_FILE = "fleet.yaml"


def _default_port() -> int:
    """Host.port's default: the SSH port a host entry without ``port`` is dialled on."""
    default = next(f.default for f in fields(Host) if f.name == "port")
    assert isinstance(default, int)
    return default


_DEFAULT_PORT = _default_port()


@dataclass(frozen=True, slots=True)
class FleetNames:
    """What proxies may refer to, read leniently from a Fleet document."""

    name: str | None
    images: tuple[str, ...]
    machine_types: tuple[str, ...]
    host_zones: tuple[tuple[str, str], ...]
    """(host name, zone) of every host whose name and zone are strings."""

    @property
    def zones(self) -> list[str]:
        return sorted({zone for _, zone in self.host_zones})

    def zone_of(self, host: str) -> str | None:
        return next((zone for name, zone in self.host_zones if name == host), None)


def fleet_names(document: Document) -> FleetNames:
    data = _dict(document.data)
    spec = _dict(data.get("spec"))
    name = _dict(data.get("metadata")).get("name")
    hosts = [_dict(host) for host in _list(spec.get("hosts"))]
    return FleetNames(
        name=name if isinstance(name, str) else None,
        images=tuple(sorted(_dict(spec.get("images")))),
        machine_types=tuple(sorted(_dict(spec.get("machineTypes")))),
        host_zones=tuple(
            (host["name"], host["zone"])
            for host in hosts
            if isinstance(host.get("name"), str) and isinstance(host.get("zone"), str)
        ),
    )


def check_fleet(document: Document) -> Iterator[Problem]:
    """Host names unique; no two hosts at the same SSH address and port."""
    names: dict[str, FieldPath] = {}
    endpoints: dict[tuple[str, int], tuple[FieldPath, str]] = {}
    hosts = _list(_dict(_dict(document.data).get("spec")).get("hosts"))
    for index, raw in enumerate(hosts):
        host = _dict(raw)
        base: FieldPath = ("spec", "hosts", index)
        name = host.get("name")
        if isinstance(name, str):
            if name in names:
                first = _where(document, names[name])
                message = f"duplicate host name '{name}' (also at {first})"
                yield _at(document, (*base, "name"), message)
            else:
                names[name] = (*base, "name")
        address, port = host.get("address"), host.get("port", _DEFAULT_PORT)
        if isinstance(address, str) and isinstance(port, int):
            endpoint = (address.lower(), port)
            if endpoint in endpoints:
                path, other = endpoints[endpoint]
                message = (
                    f"same address and port ({address}:{port}) as host '{other}' "
                    f"at {_where(document, path)}"
                )
                yield _at(document, (*base, "address"), message)
            else:
                endpoints[endpoint] = ((*base, "address"), str(name))


def check_proxies(documents: Iterable[Document], fleet: FleetNames | None) -> Iterator[Problem]:
    """Unique proxy names; names, zones, images, machine types, hosts that resolve."""
    first_seen: dict[str, Document] = {}
    name_path: FieldPath = ("metadata", "name")
    for document in sorted(documents, key=lambda d: (d.file, d.start.line)):
        name = _dict(_dict(document.data).get("metadata")).get("name")
        if isinstance(name, str):
            if name in first_seen:
                where = _where(first_seen[name], name_path)
                yield _at(document, name_path, f"duplicate proxy name '{name}' (also at {where})")
            else:
                first_seen[name] = document
        if fleet is not None:
            yield from _check_references(document, name, fleet)


def _check_references(document: Document, name: object, fleet: FleetNames) -> Iterator[Problem]:
    if isinstance(name, str) and fleet.name is not None:
        length = naming.domain_name_length(fleet.name, name)
        if length > naming.MAX_DOMAIN_NAME:
            message = (
                f"too long: the VM's domain name pf-{fleet.name}-{name}-<digest> would have "
                f"{length} characters, at most {naming.MAX_DOMAIN_NAME} are allowed"
            )
            yield _at(document, ("metadata", "name"), message)
    placement = _dict(_dict(_dict(document.data).get("spec")).get("placement"))
    base: FieldPath = ("spec", "placement")
    image = placement.get("image")
    if isinstance(image, str) and not naming.is_image_url(image) and image not in fleet.images:
        yield _at(document, (*base, "image"), _unknown("image", image, fleet.images))
    machine_type = placement.get("machineType")
    if isinstance(machine_type, str) and machine_type not in fleet.machine_types:
        message = _unknown("machine type", machine_type, fleet.machine_types)
        yield _at(document, (*base, "machineType"), message)
    zone = placement.get("zone")
    if isinstance(zone, str) and zone not in fleet.zones:
        yield _at(document, (*base, "zone"), _unknown("zone", zone, fleet.zones))
    host = placement.get("host")
    if isinstance(host, str):
        host_zone = fleet.zone_of(host)
        if host_zone is None:
            known = [name for name, _ in fleet.host_zones]
            yield _at(document, (*base, "host"), _unknown("host", host, known))
        elif isinstance(zone, str) and host_zone != zone:
            message = f"host '{host}' is in zone '{host_zone}', not in '{zone}'"
            yield _at(document, (*base, "host"), message)


def _unknown(what: str, name: str, known: Iterable[str]) -> str:
    known = list(known)
    listing = ", ".join(known) if known else "none"
    return f"unknown {what} '{name}'{did_you_mean(name, known)}; {FLEET_FILE} has: {listing}"


def _at(document: Document, path: FieldPath, message: str) -> Problem:
    mark = document.value_mark(path)
    return Problem(document.file, mark.line, mark.column, format_path(path), message)


def _where(document: Document, path: FieldPath) -> str:
    mark = document.value_mark(path)
    return f"{document.file}:{mark.line}:{mark.column}"


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
