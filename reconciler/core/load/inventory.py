"""The inventory JSON format, printed by ``inventory --json`` and read by ``plan --inventory``.

::

    {"hosts": [
      {"name": "kvm01", "reachable": true, "domains": [
        {"name": "pf-home-web-1-0123abcd", "state": "running",
         "owner": {"fleet": "home", "proxy": "web-1", "digest": "<sha256 hex>"}},
        {"name": "windows11", "state": "shutoff", "owner": null}],
       "volumes": ["base-debian-12-0123456789ab.qcow2", "pf-home-web-1-0123abcd.qcow2"]},
      {"name": "kvm02", "reachable": false, "error": "ssh: connection refused"}]}

``state`` is one of running, shutoff, paused, crashed, other. ``owner`` may also
carry the provenance recorded at creation: ``imageKey``, ``imageSha256``,
``imageBase`` (the base volume its overlay backs onto), ``revision``,
``created`` (strings) and ``protect`` (bool); they are written only when set.
``volumes`` (optional, default none) names the volumes of the
host's pool. An unreachable host lists no domains and no volumes. A reachable
host may carry ``capacity`` (``cpus``, ``memoryMiB``, ``poolCapacityBytes``,
``poolAvailableBytes``), and the document ``baseSizes``: bytes by base volume
name, for the bases a plan may upload (a base not listed: size not known yet).

``schemas/inventory.schema.json`` states the shape, checked by the manifests'
machinery (``schemacheck.check``: the same wording, counts are whole numbers);
what a schema cannot say (a host or a domain listed twice) is checked here. Parsing collects every
problem, each naming the file, line, column and field
(``hosts[1].domains[0].state``), and raises one InvalidInput.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from reconciler.core.load.jsonload import load_json
from reconciler.core.load.schemacheck import INVENTORY, check
from reconciler.core.load.yamlload import Document, FieldPath, format_path
from reconciler.errors import InvalidInput, Problem
from reconciler.model import Domain, DomainState, HostInventory, Inventory, Owner
from reconciler.model.inventory import BaseSize, Capacity

_OWNER_EXTRA = (
    ("imageKey", "image_key"),
    ("imageSha256", "image_sha256"),
    ("imageBase", "image_base"),
    ("revision", "revision"),
    ("created", "created"),
)


def load_inventory(path: Path) -> Inventory:
    """Read and parse an inventory file; an unreadable file is InvalidInput too."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput([Problem(str(path), 0, 0, "", f"cannot read: {exc}")]) from exc
    return parse_inventory(text, file=str(path))


def parse_inventory(text: str, *, file: str) -> Inventory:
    """The inventory in ``text`` (the content of ``file``); InvalidInput lists every problem:
    the schema's first, in the order of the file, then hosts or domains listed twice."""
    document, broken = load_json(text, file)
    if document is None:
        raise InvalidInput([broken] if broken is not None else [])
    problems = check(document, INVENTORY)
    problems.extend(_duplicates(document))
    if problems:
        raise InvalidInput(problems)
    return _inventory(document.data)


def inventory_to_dict(inventory: Inventory) -> dict[str, Any]:
    out: dict[str, Any] = {"hosts": [_host_to_dict(h) for h in inventory.hosts]}
    if inventory.base_sizes:
        out["baseSizes"] = {b.volume: b.size_bytes for b in inventory.base_sizes}
    return out


def dump_inventory(inventory: Inventory) -> str:
    """The JSON text, indented, with a trailing newline; parse_inventory reads it back."""
    return json.dumps(inventory_to_dict(inventory), indent=2) + "\n"


def _host_to_dict(host: HostInventory) -> dict[str, Any]:
    out: dict[str, Any] = {"name": host.name, "reachable": host.reachable}
    if host.reachable:
        out["domains"] = [_domain_to_dict(d) for d in host.domains]
        if host.volumes:
            out["volumes"] = list(host.volumes)
        if host.capacity is not None:
            out["capacity"] = _capacity_to_dict(host.capacity)
    if host.error is not None:
        out["error"] = host.error
    return out


def _capacity_to_dict(capacity: Capacity) -> dict[str, Any]:
    return {
        "cpus": capacity.cpus,
        "memoryMiB": capacity.memory_mib,
        "poolCapacityBytes": capacity.pool_capacity_bytes,
        "poolAvailableBytes": capacity.pool_available_bytes,
    }


def _domain_to_dict(domain: Domain) -> dict[str, Any]:
    owner: dict[str, Any] | None = None
    if domain.owner is not None:
        o = domain.owner
        owner = {"fleet": o.fleet, "proxy": o.proxy, "digest": o.digest}
        for key, attr in _OWNER_EXTRA:
            if getattr(o, attr):
                owner[key] = getattr(o, attr)
        if o.protect:
            owner["protect"] = True
    found: dict[str, Any] = {"name": domain.name, "state": domain.state.value, "owner": owner}
    if domain.reason:
        found["reason"] = domain.reason
    if domain.vcpus is not None:
        found["vcpus"] = domain.vcpus
    if domain.memory_mib is not None:
        found["memoryMiB"] = domain.memory_mib
    return found


def _duplicates(document: Document) -> Iterator[Problem]:
    """Hosts, and domains of one host, listed twice: names are unique there."""

    def listed_twice(items: object, at: FieldPath, what: str) -> Iterator[Problem]:
        seen: set[str] = set()
        for index, item in enumerate(items if isinstance(items, list) else []):
            name = item.get("name") if isinstance(item, dict) else None
            if not isinstance(name, str):
                continue
            if name in seen:
                mark = document.value_mark((*at, index, "name"))
                field = format_path((*at, index, "name"))
                message = f"{what} {name!r} is listed twice"
                yield Problem(document.file, mark.line, mark.column, field, message)
            seen.add(name)

    hosts = document.data.get("hosts") if isinstance(document.data, dict) else None
    yield from listed_twice(hosts, ("hosts",), "host")
    for index, host in enumerate(hosts if isinstance(hosts, list) else []):
        if isinstance(host, dict):
            yield from listed_twice(host.get("domains"), ("hosts", index, "domains"), "domain")


def _inventory(data: dict[str, Any]) -> Inventory:
    """The Inventory of a schema-valid document."""
    sizes = sorted((data.get("baseSizes") or {}).items())
    return Inventory(
        hosts=tuple(_host(raw) for raw in data["hosts"]),
        base_sizes=tuple(BaseSize(volume, size) for volume, size in sizes),
    )


def _host(raw: dict[str, Any]) -> HostInventory:
    capacity = raw.get("capacity")
    return HostInventory(
        name=raw["name"],
        reachable=raw["reachable"],
        domains=tuple(_domain(d) for d in raw.get("domains", [])),
        error=raw.get("error"),
        volumes=tuple(raw.get("volumes", [])),
        capacity=Capacity(
            cpus=capacity["cpus"],
            memory_mib=capacity["memoryMiB"],
            pool_capacity_bytes=capacity["poolCapacityBytes"],
            pool_available_bytes=capacity["poolAvailableBytes"],
        )
        if capacity is not None
        else None,
    )


def _domain(raw: dict[str, Any]) -> Domain:
    owner = raw.get("owner")
    return Domain(
        name=raw["name"],
        state=DomainState(raw["state"]),
        owner=_owner(owner) if owner is not None else None,
        reason=raw.get("reason") or "",
        vcpus=raw.get("vcpus"),
        memory_mib=raw.get("memoryMiB"),
    )


def _owner(raw: dict[str, Any]) -> Owner:
    extra = {attr: raw.get(key) or "" for key, attr in _OWNER_EXTRA}
    return Owner(
        fleet=raw["fleet"],
        proxy=raw["proxy"],
        digest=raw["digest"],
        protect=raw.get("protect", False),
        **extra,
    )
