"""One reading of each manifest document: what it names, and its model once valid.

After the schema check (the one walk that looks at every value), each Fleet or Proxy
document is read once more, here, and only here. The reading serves every later step:

- the cross-references (``crossref``) get what the document *names*: the fleet's
  name, image keys, machine types, hosts; a proxy's name and placement. These
  are read leniently, from documents that failed their schema too (so one run
  reports a typo in fleet.yaml *and* the proxy pointing at a zone nobody
  defined): a value of the wrong type is None, the schema check said why;
- the userData checks (``cloudconfig``, ``secretrefs``) get the cloud-init texts, and
  ``fixedaddress`` the fixed address;
- when the schema check passed, the same pass builds the model (``Fleet``, ``Proxy``)
  from the values it has just read, so no step digs into the document's dicts again.
  A ``Proxy`` is built once, by ``ProxyReading.model``, when its userData has been
  read (``userdata``) and its secrets resolved (``secretrefs``): until then the
  reading holds the rest of it, read here, as a ``partial``.

A Proxy is read with fleet.yaml's defaults already merged in; each member of a
ProxySet is read as the Proxy document it stands for (``proxyset``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from functools import partial
from typing import Any

from reconciler.core.load import fixedaddress
from reconciler.core.load.policies import read_health, read_policy
from reconciler.core.load.yamlload import Document, FieldPath
from reconciler.model.fleet import (
    CloudInit,
    DomainType,
    Firmware,
    FixedAddress,
    Fleet,
    Host,
    HostNetwork,
    HostState,
    Image,
    ImageFormat,
    Lifecycle,
    Location,
    MachineType,
    Placement,
    Proxy,
)
from reconciler.model.secrets import SecretValue


def _default_port() -> int:
    """Host.port's default: the SSH port a host entry without ``port`` is dialled on."""
    default = next(f.default for f in fields(Host) if f.name == "port")
    assert isinstance(default, int)
    return default


DEFAULT_PORT = _default_port()


@dataclass(frozen=True, slots=True)
class HostEntry:
    """One ``spec.hosts[]`` entry as written (None: absent or of the wrong type)."""

    path: FieldPath
    name: str | None
    address: str | None
    port: int | None
    zone: str | None


@dataclass(frozen=True, slots=True)
class UserDataSource:
    """Where a proxy's userData text was written, for pinning problems inside it.

    ``document`` and ``path`` name the manifest field (the proxy's own, or fleet.yaml's
    ``spec.proxyDefaults`` one it inherited); ``file`` is the repo-relative userData file
    when the field is ``userDataFile`` (problems then point into that file).
    """

    document: Document
    path: FieldPath
    file: str | None = None


@dataclass(frozen=True, slots=True)
class FleetReading:
    """A Fleet document, read once: what proxies may refer to, and the model if valid."""

    document: Document
    name: str | None
    images: tuple[str, ...]
    """Every ``spec.images`` key, sorted (valid names or not: proxies may refer to them)."""
    machine_types: tuple[str, ...]
    hosts: tuple[HostEntry, ...]
    fleet: Fleet | None
    """The model; None when the document failed its schema check."""
    proxy_defaults: dict[str, Any] = field(default_factory=dict)
    """``spec.proxyDefaults`` as written (``proxydefaults`` merges it into proxies)."""
    default_references: tuple[tuple[str, str], ...] = ()
    """(field, value) of ``spec.proxyDefaults.placement``'s zone, image and machineType."""

    @property
    def host_zones(self) -> list[tuple[str, str]]:
        """(name, zone) of every host whose name and zone are strings: what a proxy may
        be placed on."""
        return [(h.name, h.zone) for h in self.hosts if h.name is not None and h.zone is not None]

    @property
    def zones(self) -> list[str]:
        return sorted({zone for _, zone in self.host_zones})

    def zone_of(self, host: str) -> str | None:
        return next((zone for name, zone in self.host_zones if name == host), None)


@dataclass(frozen=True, slots=True)
class ProxyReading:
    """A Proxy document, read once: its name, references, cloud-init texts, and model."""

    document: Document
    name: str | None
    zone: str | None
    image: str | None
    machine_type: str | None
    host: str | None
    user_data: str | None
    vendor_data: str | None
    network_config: str | None
    proxy: partial[Proxy] | None
    """The model but its cloud-init, built by ``model`` once the userData is read and its
    secrets resolved; None when the schema check failed."""
    user_data_file: str | None = None
    """``spec.cloudInit.userDataFile`` as written (``userdata`` reads it)."""
    labels: tuple[tuple[str, str], ...] = ()
    """The string-valued labels, sorted (what ``${proxy.labels.KEY}`` may name)."""
    inherited: frozenset[FieldPath] = frozenset()
    """Paths whose value came from fleet.yaml's ``spec.proxyDefaults`` (checked there)."""
    set_name: str | None = None
    """The ProxySet this proxy is a member of; None for a Proxy document."""
    template_only: bool = False
    """A ``replicas: 0`` set's template, read to be checked: no proxy, no name taken."""
    source: UserDataSource | None = None
    """Where ``user_data`` was written (set once it is read: ``userdata.resolve``)."""
    network: FixedAddress | None = None  # spec.network, read leniently (fixedaddress)

    def with_user_data(self, text: str | None, source: UserDataSource) -> ProxyReading:
        """This reading with its userData read (from a file, variables substituted)."""
        return replace(self, user_data=text, source=source)

    def model(self, secrets: tuple[SecretValue, ...]) -> Proxy:
        """The ``Proxy``, built once: the userData as read, the secrets it refers to resolved."""
        assert self.proxy is not None, "only a schema-valid proxy has a model"
        cloud_init = CloudInit(
            user_data=self.user_data or "",
            vendor_data=self.vendor_data,
            network_config=self.network_config,
            secrets=secrets,
        )
        return self.proxy(cloud_init=cloud_init)


def read_fleet(document: Document, *, valid: bool) -> FleetReading:
    """Read a Fleet document; ``valid``: it passed its schema check, build the model."""
    data = _dict(document.data)
    metadata, spec = _dict(data.get("metadata")), _dict(data.get("spec"))
    images, machine_types = _dict(spec.get("images")), _dict(spec.get("machineTypes"))
    name = _str(metadata.get("name"))
    raw_hosts = [_dict(host) for host in _list(spec.get("hosts"))]
    hosts = tuple(
        HostEntry(
            path=("spec", "hosts", index),
            name=_str(host.get("name")),
            address=_str(host.get("address")),
            port=_int(host.get("port", DEFAULT_PORT)),
            zone=_str(host.get("zone")),
        )
        for index, host in enumerate(raw_hosts)
    )
    defaults = _dict(spec.get("proxyDefaults"))
    default_placement = _dict(defaults.get("placement"))
    references = tuple(
        (key, value)
        for key in ("zone", "image", "machineType")
        if (value := _str(default_placement.get(key))) is not None
    )
    fleet = None
    if valid:
        assert name is not None
        fleet = Fleet(
            name=name,
            images=tuple(_image(key, images[key], document) for key in sorted(images)),
            machine_types=tuple(
                _machine_type(key, machine_types[key]) for key in sorted(machine_types)
            ),
            hosts=tuple(
                _host(raw, entry, document) for raw, entry in zip(raw_hosts, hosts, strict=True)
            ),
            policy=read_policy(_dict(spec.get("policy"))),
            location=_location(document),
        )
    return FleetReading(
        document=document,
        name=name,
        images=tuple(sorted(images)),
        machine_types=tuple(sorted(machine_types)),
        hosts=hosts,
        fleet=fleet,
        proxy_defaults=defaults,
        default_references=references,
    )


def read_proxy(
    document: Document,
    *,
    valid: bool,
    inherited: frozenset[FieldPath] = frozenset(),
    set_name: str | None = None,
    template_only: bool = False,
) -> ProxyReading:
    """Read a Proxy document (fleet.yaml's defaults merged in, ``inherited`` the paths they
    filled; a ProxySet member's is its set's, named); ``valid``: it passed its schema
    check, build the model."""
    data = _dict(document.data)
    metadata, spec = _dict(data.get("metadata")), _dict(data.get("spec"))
    placement, cloud = _dict(spec.get("placement")), _dict(spec.get("cloudInit"))
    name, user_data = _str(metadata.get("name")), _str(cloud.get("userData"))
    zone, image = _str(placement.get("zone")), _str(placement.get("image"))
    machine_type, host = _str(placement.get("machineType")), _str(placement.get("host"))
    vendor_data, network_config = _str(cloud.get("vendorData")), _str(cloud.get("networkConfig"))
    network = fixedaddress.read(spec.get("network"))  # the model's too, once valid
    proxy = None
    if valid:
        assert name is not None and zone is not None
        assert image is not None and machine_type is not None
        proxy = partial(
            Proxy,
            name=name,
            placement=Placement(zone=zone, image=image, machine_type=machine_type, host=host),
            install_guest_agent=spec.get("installGuestAgent", True),
            health=read_health(spec.get("health", {})),
            lifecycle=Lifecycle(protect=spec.get("lifecycle", {}).get("protect", False)),
            labels=tuple(sorted(metadata.get("labels", {}).items())),
            annotations=tuple(sorted(metadata.get("annotations", {}).items())),
            location=_location(document),
            proxy_set=set_name or "",
            network=network,
        )
    return ProxyReading(
        document=document,
        name=name,
        zone=zone,
        image=image,
        machine_type=machine_type,
        host=host,
        user_data=user_data,
        vendor_data=vendor_data,
        network_config=network_config,
        proxy=proxy,
        user_data_file=_str(cloud.get("userDataFile")),
        labels=tuple(
            sorted((k, v) for k, v in _dict(metadata.get("labels")).items() if isinstance(v, str))
        ),
        inherited=inherited,
        set_name=set_name,
        template_only=template_only,
        network=network,
    )


def _location(document: Document) -> Location:
    return Location(document.file, document.start.line, document.start.column)


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


def _machine_type(key: str, value: dict[str, Any]) -> MachineType:
    return MachineType(
        key=key, vcpus=value["vcpus"], memory_mib=value["memoryMiB"], disk_gib=value["diskGiB"]
    )


_HOST_OPTIONS = (
    ("user", "user"),
    ("pool", "pool"),
    ("socket", "socket"),
    ("cpu_mode", "cpuMode"),
    ("tcg_cache_mib", "tcgCacheMiB"),
    ("max_proxies", "maxProxies"),
)


def _host(value: dict[str, Any], entry: HostEntry, document: Document) -> Host:
    assert entry.name is not None and entry.address is not None and entry.zone is not None
    assert entry.port is not None
    ((kind, name),) = value["network"].items()
    options: dict[str, Any] = {
        field_name: value[key] for field_name, key in _HOST_OPTIONS if key in value
    }
    if "domainType" in value:
        options["domain_type"] = DomainType(value["domainType"])
    if "state" in value:
        options["state"] = HostState(value["state"])
    mark = document.value_mark(entry.path)
    return Host(
        name=entry.name,
        address=entry.address,
        zone=entry.zone,
        port=entry.port,
        network=HostNetwork(kind=kind, name=name),
        location=Location(document.file, mark.line, mark.column),
        **options,
    )


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
