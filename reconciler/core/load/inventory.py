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
host's pool. An unreachable host lists no domains and no volumes. Parsing collects every
problem, each naming the file and the field (``hosts[1].domains[0].state``),
and raises one InvalidInput.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from reconciler.errors import InvalidInput, Problem
from reconciler.model import Domain, DomainState, HostInventory, Inventory, Owner
from reconciler.model.inventory import Capacity

_OWNER_EXTRA = (
    ("imageKey", "image_key"),
    ("imageSha256", "image_sha256"),
    ("imageBase", "image_base"),
    ("revision", "revision"),
    ("created", "created"),
)
_STATES = ", ".join(s.value for s in DomainState)


def load_inventory(path: Path) -> Inventory:
    """Read and parse an inventory file; an unreadable file is InvalidInput too."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput([Problem(str(path), 0, 0, "", f"cannot read: {exc}")]) from exc
    return parse_inventory(text, file=str(path))


def parse_inventory(text: str, *, file: str) -> Inventory:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            [Problem(file, exc.lineno, exc.colno, "", f"not JSON: {exc.msg}")]
        ) from exc
    reader = _Reader(file)
    inventory = reader.inventory(document)
    if reader.problems:
        raise InvalidInput(reader.problems)
    return inventory


def inventory_to_dict(inventory: Inventory) -> dict[str, Any]:
    return {"hosts": [_host_to_dict(h) for h in inventory.hosts]}


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


class _Reader:
    """Walks the decoded JSON, collecting problems instead of stopping at the first."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []

    def problem(self, field: str, message: str) -> None:
        self.problems.append(Problem(self.file, 0, 0, field, message))

    def inventory(self, document: object) -> Inventory:
        if not isinstance(document, dict):
            self.problem("", "must be an object with a 'hosts' list")
            return Inventory()
        self.unknown_keys(document, {"hosts"}, "")
        raw_hosts = document.get("hosts")
        if not isinstance(raw_hosts, list):
            self.problem("hosts", "must be a list")
            return Inventory()
        hosts: list[HostInventory] = []
        seen: set[str] = set()
        for i, raw in enumerate(raw_hosts):
            host = self.host(raw, f"hosts[{i}]")
            if host is None:
                continue
            if host.name in seen:
                self.problem(f"hosts[{i}].name", f"host {host.name!r} is listed twice")
            seen.add(host.name)
            hosts.append(host)
        return Inventory(hosts=tuple(hosts))

    def host(self, raw: object, at: str) -> HostInventory | None:
        if not isinstance(raw, dict):
            self.problem(at, "must be an object")
            return None
        self.unknown_keys(raw, {"name", "reachable", "domains", "error", "volumes", "capacity"}, at)
        name = self.string(raw, "name", at)
        reachable = raw.get("reachable")
        if not isinstance(reachable, bool):
            self.problem(f"{at}.reachable", "must be true or false")
        error = self.string(raw, "error", at, required=False)
        raw_domains = raw.get("domains", [])
        if not isinstance(raw_domains, list):
            self.problem(f"{at}.domains", "must be a list")
            raw_domains = []
        if raw_domains and reachable is False:
            self.problem(f"{at}.domains", "an unreachable host cannot list domains")
        domains: list[Domain] = []
        seen: set[str] = set()
        for j, raw_domain in enumerate(raw_domains):
            domain = self.domain(raw_domain, f"{at}.domains[{j}]")
            if domain is None:
                continue
            if domain.name in seen:
                self.problem(f"{at}.domains[{j}].name", f"domain {domain.name!r} is listed twice")
            seen.add(domain.name)
            domains.append(domain)
        volumes = self.volumes(raw.get("volumes", []), f"{at}.volumes")
        if volumes and reachable is False:
            self.problem(f"{at}.volumes", "an unreachable host cannot list volumes")
        capacity = self.capacity(raw.get("capacity"), f"{at}.capacity")
        if name is None or not isinstance(reachable, bool):
            return None
        return HostInventory(
            name=name,
            reachable=reachable,
            domains=tuple(domains),
            error=error,
            volumes=volumes,
            capacity=capacity,
        )

    def volumes(self, raw: object, at: str) -> tuple[str, ...]:
        if not isinstance(raw, list) or not all(isinstance(v, str) and v for v in raw):
            self.problem(at, "must be a list of volume names")
            return ()
        return tuple(raw)

    def domain(self, raw: object, at: str) -> Domain | None:
        if not isinstance(raw, dict):
            self.problem(at, "must be an object")
            return None
        self.unknown_keys(raw, {"name", "state", "owner", "reason", "vcpus", "memoryMiB"}, at)
        name = self.string(raw, "name", at)
        state_text = self.string(raw, "state", at)
        state: DomainState | None = None
        if state_text is not None:
            try:
                state = DomainState(state_text)
            except ValueError:
                self.problem(f"{at}.state", f"{state_text!r} is not one of {_STATES}")
        owner = self.owner(raw.get("owner"), f"{at}.owner")
        reason = self.optional(raw, "reason", at)
        vcpus, memory = (self.count(raw, key, at) for key in ("vcpus", "memoryMiB"))
        if name is None or state is None:
            return None
        return Domain(
            name=name, state=state, owner=owner, reason=reason, vcpus=vcpus, memory_mib=memory
        )

    def capacity(self, raw: object, at: str) -> Capacity | None:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            self.problem(at, "must be an object")
            return None
        keys = ("cpus", "memoryMiB", "poolCapacityBytes", "poolAvailableBytes")
        self.unknown_keys(raw, set(keys), at)
        values = [self.count(raw, key, at) for key in keys]
        for key, value in zip(keys, values, strict=True):
            if value is None:
                self.problem(f"{at}.{key}", "is required")
        cpus, memory, size, available = values
        if cpus is None or memory is None or size is None or available is None:
            return None
        return Capacity(
            cpus=cpus, memory_mib=memory, pool_capacity_bytes=size, pool_available_bytes=available
        )

    def count(self, raw: dict[str, Any], key: str, at: str) -> int | None:
        value = raw.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            self.problem(f"{at}.{key}", "must be a whole number, 0 or more")
            return None
        return value

    def owner(self, raw: object, at: str) -> Owner | None:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            self.problem(at, "must be an object or null")
            return None
        known = {"fleet", "proxy", "digest", "protect", *(key for key, _ in _OWNER_EXTRA)}
        self.unknown_keys(raw, known, at)
        fleet = self.string(raw, "fleet", at)
        proxy = self.string(raw, "proxy", at)
        digest = self.string(raw, "digest", at)
        extra = {attr: self.optional(raw, key, at) for key, attr in _OWNER_EXTRA}
        protect = raw.get("protect", False)
        if not isinstance(protect, bool):
            self.problem(f"{at}.protect", "must be true or false")
            protect = False
        if fleet is None or proxy is None or digest is None:
            return None
        return Owner(
            fleet=fleet,
            proxy=proxy,
            digest=digest,
            image_key=extra["image_key"],
            image_sha256=extra["image_sha256"],
            image_base=extra["image_base"],
            revision=extra["revision"],
            created=extra["created"],
            protect=protect,
        )

    def optional(self, raw: dict[str, Any], key: str, at: str) -> str:
        return self.string(raw, key, at, required=False) or ""

    def string(
        self, raw: dict[str, Any], key: str, at: str, *, required: bool = True
    ) -> str | None:
        value = raw.get(key)
        field = f"{at}.{key}" if at else key
        if value is None:
            if required:
                self.problem(field, "is required")
            return None
        if not isinstance(value, str) or (required and not value):
            self.problem(field, "must be a non-empty string" if required else "must be a string")
            return None
        return value

    def unknown_keys(self, raw: dict[str, Any], known: set[str], at: str) -> None:
        for key in sorted(set(raw) - known):
            self.problem(f"{at}.{key}" if at else key, "is not a known field")
