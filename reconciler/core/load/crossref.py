"""The checks a JSON Schema cannot express: uniqueness and references.

They run on each document's reading (``reading``: what it names, read
leniently), even for documents that failed their schema, so one run reports a
typo in fleet.yaml *and* the proxy that points at a zone nobody defined. A
value of the wrong type is None in the reading and simply skipped here: the
schema check has already reported it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from reconciler.core import naming
from reconciler.core.load import proxydefaults
from reconciler.core.load.reading import FleetReading, ProxyReading
from reconciler.core.load.schemacheck import did_you_mean
from reconciler.core.load.yamlload import Document, FieldPath, format_path
from reconciler.errors import Problem

FLEET_FILE = "fleet.yaml"


def check_fleet(fleet: FleetReading) -> Iterator[Problem]:
    """Host names unique; no two hosts at the same SSH address and port."""
    document = fleet.document
    names: dict[str, FieldPath] = {}
    endpoints: dict[tuple[str, int], tuple[FieldPath, str]] = {}
    for host in fleet.hosts:
        if host.name is not None:
            if host.name in names:
                first = _where(document, names[host.name])
                message = f"duplicate host name '{host.name}' (also at {first})"
                yield _at(document, (*host.path, "name"), message)
            else:
                names[host.name] = (*host.path, "name")
        if host.address is not None and host.port is not None:
            endpoint = (host.address.lower(), host.port)
            if endpoint in endpoints:
                path, other = endpoints[endpoint]
                message = (
                    f"same address and port ({host.address}:{host.port}) as host '{other}' "
                    f"at {_where(document, path)}"
                )
                yield _at(document, (*host.path, "address"), message)
            else:
                endpoints[endpoint] = ((*host.path, "address"), str(host.name))
    base: FieldPath = (*proxydefaults.DEFAULTS_PATH, "placement")
    known = {"zone": fleet.zones, "image": fleet.images, "machineType": fleet.machine_types}
    for key, value in fleet.default_references:
        if key == "image" and naming.is_image_url(value):
            continue
        if value not in known[key]:
            what = "machine type" if key == "machineType" else key
            yield _at(document, (*base, key), _unknown(what, value, known[key]))


def check_proxies(proxies: Iterable[ProxyReading], fleet: FleetReading | None) -> Iterator[Problem]:
    """Unique proxy names; names, zones, images, machine types, hosts that resolve."""
    first_seen: dict[str, ProxyReading] = {}
    name_path: FieldPath = ("metadata", "name")
    for proxy in sorted(proxies, key=lambda p: (p.document.file, p.document.start.line)):
        document, name = proxy.document, proxy.name
        if name is not None and not proxy.template_only:
            if name in first_seen:
                first = first_seen[name]
                where = _where(first.document, name_path)
                if proxy.set_name is None and first.set_name is None:
                    message = f"duplicate proxy name '{name}' (also at {where})"
                else:
                    message = (
                        f"duplicate proxy name '{name}': {_what(proxy)} here, "
                        f"{_what(first)} at {where}"
                    )
                yield _at(document, name_path, message)
            else:
                first_seen[name] = proxy
        if fleet is not None:
            yield from _check_references(proxy, fleet)


def _check_references(proxy: ProxyReading, fleet: FleetReading) -> Iterator[Problem]:
    document = proxy.document
    if proxy.name is not None and fleet.name is not None:
        length = naming.domain_name_length(fleet.name, proxy.name)
        if length > naming.MAX_DOMAIN_NAME:
            message = (
                f"too long: the VM's domain name pf-{fleet.name}-{proxy.name}-<digest> would "
                f"have {length} characters, at most {naming.MAX_DOMAIN_NAME} are allowed"
            )
            yield _at(document, ("metadata", "name"), message)
    base: FieldPath = ("spec", "placement")

    def own(key: str) -> bool:  # a default's reference is checked once, at fleet.yaml
        return not proxydefaults.inherits(proxy.inherited, (*base, key))

    image = proxy.image
    known_image = image is None or naming.is_image_url(image) or image in fleet.images
    if not known_image and own("image"):
        assert image is not None
        yield _at(document, (*base, "image"), _unknown("image", image, fleet.images))
    machine_type = proxy.machine_type
    if machine_type is not None and machine_type not in fleet.machine_types and own("machineType"):
        message = _unknown("machine type", machine_type, fleet.machine_types)
        yield _at(document, (*base, "machineType"), message)
    zone = proxy.zone
    # A host whose zone (or name) fleet.yaml left out already has its problem there; the
    # zones (names) the rest list are not all there are, so a miss here proves nothing.
    zones_known = all(h.zone is not None for h in fleet.hosts)
    if zone is not None and zone not in fleet.zones and own("zone") and zones_known:
        yield _at(document, (*base, "zone"), _unknown("zone", zone, fleet.zones))
    host = proxy.host
    if host is not None:
        host_zone = fleet.zone_of(host)
        if host_zone is None:
            if zones_known and all(h.name is not None for h in fleet.hosts):
                known = [name for name, _ in fleet.host_zones]
                yield _at(document, (*base, "host"), _unknown("host", host, known))
        elif zone is not None and host_zone != zone:
            message = f"host '{host}' is in zone '{host_zone}', not in '{zone}'"
            yield _at(document, (*base, "host"), message)


def _what(proxy: ProxyReading) -> str:
    if proxy.set_name is None:
        return "a Proxy"
    return f"a proxy of ProxySet '{proxy.set_name}'"


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
