"""The desired state: `kind: Fleet` (fleet.yaml) and `kind: Proxy` manifests.

Field names follow DESIGN.md, in snake_case. Defaults here are the defaults
operators get when a field is left out; docs/configuration.md lists them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum

from reconciler.model.secrets import SecretValue, substitute


@dataclass(frozen=True, slots=True)
class Location:
    """Where a value came from: file relative to the repo root, 1-based line/column."""

    file: str
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}"


class Firmware(StrEnum):
    UEFI = "uefi"
    BIOS = "bios"


class ImageFormat(StrEnum):
    QCOW2 = "qcow2"
    RAW = "raw"


class DomainType(StrEnum):
    KVM = "kvm"
    QEMU = "qemu"


class HostState(StrEnum):
    """What placement may do with a host (``spec.hosts[].state``), as ``kubectl cordon`` and
    ``drain`` do with a node: ``active`` takes new VMs; ``cordoned`` takes none and keeps
    what it runs; ``draining`` takes none and its VMs are replaced elsewhere."""

    ACTIVE = "active"
    CORDONED = "cordoned"
    DRAINING = "draining"


class DriftMode(StrEnum):
    CORRECT = "correct"
    DETECT = "detect"


@dataclass(frozen=True, slots=True)
class Image:
    """A base image: ``key`` is the `spec.images` key (or a synthetic one for a URL)."""

    key: str
    url: str
    sha256: str | None = None
    format: ImageFormat = ImageFormat.QCOW2
    firmware: Firmware = Firmware.UEFI
    location: Location = field(default=Location(""), compare=False)
    """Where ``url`` is written (errors about it point there)."""


@dataclass(frozen=True, slots=True)
class MachineType:
    key: str
    vcpus: int
    memory_mib: int
    disk_gib: int


@dataclass(frozen=True, slots=True)
class HostNetwork:
    """Where a guest's NIC plugs in: ``kind`` is ``bridge`` or ``network``."""

    kind: str
    name: str


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    address: str
    zone: str
    network: HostNetwork
    port: int = 22
    user: str = "root"
    pool: str = "default"
    socket: str = "/var/run/libvirt/libvirt-sock"
    domain_type: DomainType = DomainType.KVM
    cpu_mode: str = "host-model"
    tcg_cache_mib: int = 256
    """QEMU's TCG translation cache per VM under ``domain_type`` QEMU (MiB)."""
    max_proxies: int | None = None
    state: HostState = HostState.ACTIVE
    location: Location = field(default=Location(""), compare=False)

    @property
    def schedulable(self) -> bool:
        """Placement may put a new VM here: the host is neither cordoned nor draining."""
        return self.state is HostState.ACTIVE

    @property
    def tcg_cache(self) -> int | None:
        """The TCG translation cache each VM gets here (MiB); None under KVM."""
        return self.tcg_cache_mib if self.domain_type is DomainType.QEMU else None

    def vm_memory_mib(self, memory_mib: int) -> int:
        """What a VM of ``memory_mib`` takes of this host's memory: its own,
        plus the translation cache QEMU allocates for it under TCG."""
        return memory_mib + (self.tcg_cache or 0)


@dataclass(frozen=True, slots=True)
class Amount:
    """A count of proxies, or a percentage of a zone's proxies (``percent``)."""

    value: int
    percent: bool = False

    def of(self, total: int, *, round_up: bool) -> int:
        """The count this amount means in a zone of ``total`` proxies."""
        if not self.percent:
            return self.value
        scaled = self.value * total
        return -(-scaled // 100) if round_up else scaled // 100

    def __str__(self) -> str:
        return f"{self.value}%" if self.percent else str(self.value)


@dataclass(frozen=True, slots=True)
class Rollout:
    """``policy.rollout``: how many replaces of one zone run at once.

    Replaces are always create-before-destroy, so a batch of a zone holds at
    most ``max_surge`` + ``max_unavailable`` replaces (percentages of the
    zone's proxies: surge rounded up, unavailable down; at least 1), and the
    next batch starts only once that batch's new VMs are healthy.
    """

    max_unavailable: Amount = Amount(0)
    max_surge: Amount = Amount(1)

    def batch_size(self, zone_proxies: int) -> int:
        surge = self.max_surge.of(zone_proxies, round_up=True)
        unavailable = self.max_unavailable.of(zone_proxies, round_up=False)
        return max(1, surge + unavailable)


@dataclass(frozen=True, slots=True)
class Overcommit:
    """``policy.overcommit``: how far a host's resources may be promised, per resource.

    A new VM fits a host when the vCPUs / memory of the running domains plus its
    own stay within the host's CPUs / memory times ``cpu`` / ``memory``, and its
    disk divided by ``disk`` (thin qcow2 overlays grow as the guest writes) fits
    the pool's free space.
    """

    memory: float = 1.0
    cpu: float = 4.0
    disk: float = 1.0


@dataclass(frozen=True, slots=True)
class Policy:
    """Safety switches. ``max_deletes_per_run`` counts deletes and replace-deletes."""

    prune: bool = False
    max_deletes_per_run: int = 5
    allow_empty: bool = False
    drift: DriftMode = DriftMode.CORRECT
    suspend: bool = False
    rollout: Rollout = Rollout()
    overcommit: Overcommit = Overcommit()
    max_shrink_percent: int = 50
    """A revision that drops more than this share of the fleet's proxies (owned VMs no
    manifest asks for any more) is Stalled until ``acknowledge_shrink_to`` says so."""
    acknowledge_shrink_to: int | None = None
    """The number of proxies a deliberate large shrink leaves; acknowledges exactly that."""


@dataclass(frozen=True, slots=True)
class Fleet:
    """fleet.yaml. ``images`` and ``machine_types`` are sorted by key."""

    name: str
    images: tuple[Image, ...] = ()
    machine_types: tuple[MachineType, ...] = ()
    hosts: tuple[Host, ...] = ()
    policy: Policy = Policy()
    location: Location = field(default=Location("fleet.yaml"), compare=False)

    def image(self, key: str) -> Image | None:
        return next((i for i in self.images if i.key == key), None)

    def machine_type(self, key: str) -> MachineType | None:
        return next((m for m in self.machine_types if m.key == key), None)

    def host(self, name: str) -> Host | None:
        return next((h for h in self.hosts if h.name == name), None)

    def hosts_in_zone(self, zone: str) -> tuple[Host, ...]:
        return tuple(h for h in self.hosts if h.zone == zone)


@dataclass(frozen=True, slots=True)
class Placement:
    """``image`` is a key of `spec.images` (the schema refuses a direct URL: docs/security.md)."""

    zone: str
    image: str
    machine_type: str
    host: str | None = None


@dataclass(frozen=True, slots=True)
class CloudInit:
    """Cloud-init content: text handed to the guest as written, never logged.

    ``user_data`` is the manifest's text, ``${secret:NAME}`` references and all;
    ``secrets`` holds the decrypted values it names (empty until they are
    resolved). ``rendered_user_data`` is what the seed ISO carries.
    ``repr`` is redacted so that a stray ``%r`` in a log line leaks nothing.
    """

    user_data: str = field(default="", repr=False)
    vendor_data: str | None = field(default=None, repr=False)
    network_config: str | None = field(default=None, repr=False)
    secrets: tuple[SecretValue, ...] = field(default=(), repr=False)

    def __repr__(self) -> str:
        return "CloudInit(<redacted>)"

    def rendered_user_data(self) -> str:
        """``user_data`` with its secrets' values in place: for the seed ISO only.

        Raises KeyError when a referenced secret was never resolved.
        """
        values = {secret.name: secret.value for secret in self.secrets}
        return substitute(self.user_data, values)


@dataclass(frozen=True, slots=True)
class HealthCheck:
    proxy_port: int = 3128
    probe_url: str = "http://connectivitycheck.gstatic.com/generate_204"
    expect_status: int = 204
    timeout_seconds: float = 10.0
    replace_after_seconds: float = 900.0
    """A running VM whose probe failed without a break this long is replaced; 0: never."""
    max_restarts: int = 3
    """Starts (drift: correct) within ``restart_window_seconds`` after which a VM that
    went down again is replaced instead of started once more."""
    restart_window_seconds: float = 3600.0


@dataclass(frozen=True, slots=True)
class FixedAddress:
    """``spec.network``: the one address a proxy holds, whichever VM serves it.

    ``address`` is an interface in CIDR form (``192.0.2.10/24``), checked at load
    (reconciler.core.load.fixedaddress) to be a host address of its network with
    ``gateway`` inside it. An address cannot exist twice, so such a proxy is replaced
    destroy-then-create (reconciler.core.plan.recreate).
    """

    address: str
    gateway: str | None = None
    nameservers: tuple[str, ...] = ()


MAC_PREFIX_BITS = 0x02
"""The first octet's locally administered bit (set) and multicast bit (clear)."""


def guest_mac(fleet: str, proxy: str) -> str:
    """The MAC of ``proxy``'s NIC: derived from the fleet's and proxy's names, so every VM
    that ever serves the proxy has it (its network-config matches on it). A locally
    administered unicast address: no vendor's, never a group's."""
    raw = bytearray(hashlib.sha256(f"{fleet}/{proxy}".encode()).digest()[:6])
    raw[0] = (raw[0] & 0xFC) | MAC_PREFIX_BITS
    return ":".join(f"{octet:02x}" for octet in raw)


@dataclass(frozen=True, slots=True)
class Lifecycle:
    protect: bool = False


@dataclass(frozen=True, slots=True)
class Proxy:
    name: str
    placement: Placement
    cloud_init: CloudInit = CloudInit()
    install_guest_agent: bool = True
    health: HealthCheck = HealthCheck()
    lifecycle: Lifecycle = Lifecycle()
    labels: tuple[tuple[str, str], ...] = ()
    annotations: tuple[tuple[str, str], ...] = ()
    location: Location = field(default=Location(""), compare=False)
    proxy_set: str = field(default="", compare=False)
    """The ProxySet this proxy is a member of ("" for a Proxy document): the shared DNS name
    it joins. Not compared: proxies rewritten as a set are the same proxies."""
    network: FixedAddress | None = None
    """``spec.network``: a fixed address (None: the host network's DHCP gives one)."""

    @property
    def restarted_at(self) -> str:
        """``metadata.annotations["proxyfleet.io/restartedAt"]``: changing it rolls the proxy."""
        for key, value in self.annotations:  # a plain loop: a genexpr costs 4x as much
            if key == RESTARTED_AT:
                return value
        return ""


RESTARTED_AT = "proxyfleet.io/restartedAt"


@dataclass(frozen=True, slots=True)
class Repo:
    """A loaded, valid fleet repo: the fleet and its proxies sorted by name."""

    fleet: Fleet
    proxies: tuple[Proxy, ...] = ()

    def proxy(self, name: str) -> Proxy | None:
        return next((p for p in self.proxies if p.name == name), None)
