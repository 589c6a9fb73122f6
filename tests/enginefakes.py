"""Fakes for the engine's tests: time, images, prober, and a small hypervisor.

The hypervisor here is a stand-in until reconciler.adapters.hypervisor.fakehost lands;
it is thread-safe, records every call, injects failures per (method, domain)
and measures how many mutating calls run at once, per host and overall.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from reconciler.cli.compose import engine as Engine
from reconciler.engine.runtime import Runtime
from reconciler.errors import NotFoundError
from reconciler.model import (
    CloudInit,
    Domain,
    DomainState,
    Fleet,
    Host,
    HostInventory,
    HostNetwork,
    Image,
    Lifecycle,
    MachineType,
    Owner,
    Placement,
    Policy,
    Proxy,
    Repo,
)
from reconciler.model.fleet import HealthCheck
from reconciler.model.inventory import Capacity
from reconciler.model.plan import NewVm
from reconciler.model.report import RunReport
from reconciler.model.settings import ApplySettings
from reconciler.model.vm import VmSpec

MUTATING_CALLS = frozenset({"ensure_image", "create", "start", "set_owner", "delete"})


class FakeTime:
    """A clock that only moves when someone sleeps."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.start = datetime(2026, 9, 4, 14, 0, tzinfo=UTC)
        self.elapsed = 0.0
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        with self._lock:
            return self.start + timedelta(seconds=self.elapsed)

    def monotonic(self) -> float:
        with self._lock:
            return self.elapsed

    def sleep(self, seconds: float) -> None:
        with self._lock:
            self.sleeps.append(seconds)
            self.elapsed += seconds

    def runtime(self, stop: threading.Event | None = None, rand: float = 0.5) -> Runtime:
        return Runtime(
            clock=self.now,
            monotonic=self.monotonic,
            sleep=self.sleep,
            random=lambda: rand,
            stop=stop if stop is not None else threading.Event(),
        )


class Gauge:
    """Counts calls in flight; remembers the most seen at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.max = 0

    def __enter__(self) -> Gauge:
        with self._lock:
            self.now += 1
            self.max = max(self.max, self.now)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


@dataclass(frozen=True)
class Fetched:
    path: Path
    sha256: str


IMAGE_BYTES = 345 * 2**20
"""What every fake image weighs: an operator's cloud image."""


class FakeImages:
    def __init__(self, failures: list[Exception] | None = None) -> None:
        self.calls: list[str] = []
        self.sized: list[str] = []
        self.failures = list(failures or [])
        self._lock = threading.Lock()

    def fetch(self, image: Image) -> Fetched:
        with self._lock:
            self.calls.append(image.key)
            if self.failures:
                raise self.failures.pop(0)
        return Fetched(Path(f"/cache/{image.key}"), "ab" * 32)

    def size(self, image: Image) -> int | None:
        with self._lock:
            self.sized.append(image.key)
        return IMAGE_BYTES


@dataclass(frozen=True)
class Probe:
    healthy: bool
    detail: str


class FakeProber:
    """Healthy unless an IP is listed in ``unhealthy``."""

    def __init__(self) -> None:
        self.unhealthy: set[str] = set()
        self.healthy_only: set[str] | None = None
        """When set, every IP but these is unhealthy."""
        self.calls: list[str] = []
        self._lock = threading.Lock()

    def probe(self, ip: str, health: HealthCheck) -> Probe:
        with self._lock:
            self.calls.append(ip)
        if ip in self.unhealthy or (self.healthy_only is not None and ip not in self.healthy_only):
            return Probe(False, f"HTTP 503 from {health.probe_url}")
        return Probe(True, f"HTTP {health.expect_status} in 0.01 s")


class LocalFakeHost:
    """An in-memory hypervisor: domains, call log, failure injection, concurrency gauge."""

    def __init__(
        self,
        name: str,
        *,
        gauge: Gauge | None = None,
        call_seconds: float = 0.0,
    ) -> None:
        self._name = name
        self._lock = threading.Lock()
        self.domains: dict[str, Domain] = {}
        self.specs: dict[str, VmSpec] = {}
        self.calls: list[tuple[str, str]] = []
        self.dialled_ahead = 0
        self.failures: dict[tuple[str, str], list[Exception]] = defaultdict(list)
        self.addresses_of: dict[str, tuple[str, ...]] = {}
        self.observe_error: Exception | None = None
        self.observe_block: threading.Event | None = None
        self.gauge = Gauge()
        self.global_gauge = gauge if gauge is not None else Gauge()
        self.call_seconds = call_seconds
        self.closed = False
        self.on_call: Callable[[str, str], None] | None = None
        self.auto_ip = True
        self._next_ip = 10
        self.capacity: Capacity | None = None

    @property
    def name(self) -> str:
        return self._name

    def mutating_calls(self) -> list[tuple[str, str]]:
        with self._lock:
            return [c for c in self.calls if c[0] in MUTATING_CALLS]

    def _enter(self, method: str, target: str) -> None:
        with self._lock:
            self.calls.append((method, target))
            queue = self.failures.get((method, target)) or self.failures.get((method, "*"))
            failure = queue.pop(0) if queue else None
        if self.on_call is not None:
            self.on_call(method, target)
        if failure is not None:
            raise failure

    def _mutate(self, method: str, target: str) -> None:
        self._enter(method, target)
        if self.call_seconds:
            with self.gauge, self.global_gauge:
                time.sleep(self.call_seconds)

    def dial_ahead(self) -> None:
        self.dialled_ahead += 1

    def observe(self) -> HostInventory:
        if self.observe_block is not None:
            self.observe_block.wait(10)
        self._enter("observe", "")
        if self.observe_error is not None:
            raise self.observe_error
        with self._lock:
            domains = tuple(sorted(self.domains.values(), key=lambda d: d.name))
        return HostInventory(
            name=self._name, reachable=True, domains=domains, capacity=self.capacity
        )

    def ensure_image(self, image: Image, local_file: Path) -> None:
        self._mutate("ensure_image", image.key)

    def create(self, spec: VmSpec) -> None:
        self._mutate("create", spec.domain)
        with self._lock:
            self.specs[spec.domain] = spec
            self.domains[spec.domain] = Domain(spec.domain, DomainState.RUNNING, spec.owner)
            if self.auto_ip and spec.domain not in self.addresses_of:
                self._next_ip += 1
                self.addresses_of[spec.domain] = (f"192.0.2.{self._next_ip}",)

    def start(self, domain: str) -> None:
        self._mutate("start", domain)
        with self._lock:
            if domain not in self.domains:
                raise NotFoundError(f"no domain {domain}", host=self._name, rpc="virDomainCreate")
            old = self.domains[domain]
            self.domains[domain] = Domain(domain, DomainState.RUNNING, old.owner)

    def set_owner(self, domain: str, owner: Owner) -> None:
        self._mutate("set_owner", domain)
        with self._lock:
            if domain not in self.domains:
                raise NotFoundError(f"no domain {domain}", host=self._name, rpc="virDomainLookup")
            old = self.domains[domain]
            self.domains[domain] = Domain(domain, old.state, owner)

    def delete(self, domain: str) -> None:
        self._mutate("delete", domain)
        with self._lock:
            if domain not in self.domains:
                raise NotFoundError(f"no domain {domain}", host=self._name, rpc="virDomainLookup")
            del self.domains[domain]
            self.specs.pop(domain, None)

    def addresses(self, domain: str) -> tuple[str, ...]:
        self._enter("addresses", domain)
        with self._lock:
            if domain not in self.domains:
                raise NotFoundError(f"no domain {domain}", host=self._name, rpc="virDomainLookup")
            return self.addresses_of.get(domain, ())

    def close(self) -> None:
        self.closed = True


@dataclass
class World:
    """Hosts by name plus the shared fakes of one test."""

    hosts: dict[str, LocalFakeHost]
    time: FakeTime = field(default_factory=FakeTime)
    images: FakeImages = field(default_factory=FakeImages)
    prober: FakeProber = field(default_factory=FakeProber)

    def mutating_calls(self) -> list[tuple[str, str, str]]:
        return [(h, m, t) for h, host in self.hosts.items() for m, t in host.mutating_calls()]


def make_host(name: str, zone: str = "a", *, max_proxies: int | None = None) -> Host:
    return Host(
        name=name,
        address=f"{name}.example.test",
        zone=zone,
        network=HostNetwork("bridge", "br0"),
        max_proxies=max_proxies,
    )


def make_proxy(
    name: str,
    *,
    zone: str = "a",
    host: str | None = None,
    user_data: str = "#cloud-config\n",
    protect: bool = False,
) -> Proxy:
    return Proxy(
        name=name,
        placement=Placement(zone=zone, image="debian-12", machine_type="small", host=host),
        cloud_init=CloudInit(user_data=user_data),
        lifecycle=Lifecycle(protect=protect),
    )


def make_repo(
    proxies: tuple[Proxy, ...],
    hosts: tuple[Host, ...] = (),
    *,
    policy: Policy | None = None,
) -> Repo:
    fleet = Fleet(
        name="home",
        images=(Image(key="debian-12", url="https://images.example.test/debian-12.qcow2"),),
        machine_types=(MachineType(key="small", vcpus=1, memory_mib=512, disk_gib=4),),
        hosts=hosts or (make_host("kvm01"),),
        policy=policy if policy is not None else Policy(prune=True),
    )
    return Repo(fleet=fleet, proxies=tuple(sorted(proxies, key=lambda p: p.name)))


FLEET = """\
apiVersion: proxyfleet/v1
kind: Fleet
metadata:
  name: home
spec:
  images:
    debian-12:
      url: https://images.example.test/debian-12.qcow2
      sha256: abababababababababababababababababababababababababababababababab
  machineTypes:
    small: {vcpus: 1, memoryMiB: 512, diskGiB: 4}
  hosts:
HOSTS
  policy:
    prune: true
    maxDeletesPerRun: 5
"""

HOST = """\
    - name: NAME
      address: NAME.example.test
      zone: a
      network: {bridge: br0}
"""

PROXY = """\
---
apiVersion: proxyfleet/v1
kind: Proxy
metadata:
  name: NAME
spec:
  placement: {zone: a, image: debian-12, machineType: small}
  cloudInit:
    userData: |
      #cloud-config
      hostname: NAME
"""


class FleetRepo:
    """A fleet repo in a temp dir, fake hosts for it, and an Engine over them."""

    def __init__(self, root: Path, hosts: tuple[str, ...] = ("kvm01", "kvm02")) -> None:
        self.root = root
        self.time = FakeTime()
        self.hosts = {name: LocalFakeHost(name) for name in hosts}
        self.made: list[str] = []
        self.stop = threading.Event()
        self.engine = Engine(
            self.factory,
            images=FakeImages(),
            prober=FakeProber(),
            settings=ApplySettings(observe_timeout=2.0),
            runtime=self.time.runtime(self.stop),
        )
        self.write(hosts, ("web-1", "web-2", "web-3"))

    def factory(self, host: Host) -> LocalFakeHost:
        self.made.append(host.name)
        return self.hosts.setdefault(host.name, LocalFakeHost(host.name))

    def write(self, hosts: tuple[str, ...], proxies: tuple[str, ...], extra: str = "") -> None:
        host_text = "".join(HOST.replace("NAME", h) for h in hosts)
        (self.root / "fleet.yaml").write_text(FLEET.replace("HOSTS\n", host_text))
        text = "".join(PROXY.replace("NAME", p) for p in proxies)
        (self.root / "proxies.yaml").write_text(text + extra)

    def cycle(self, revision: str = "rev1") -> RunReport:
        return self.engine.reconcile_once(self.root, revision=revision)

    def mutating_calls(self) -> list[tuple[str, str, str]]:
        return [(h, m, t) for h, host in self.hosts.items() for m, t in host.mutating_calls()]

    def forget_calls(self) -> None:
        for host in self.hosts.values():
            host.calls.clear()

    def where(self, proxy: str) -> tuple[str, str]:
        for name, host in self.hosts.items():
            for domain in host.domains.values():
                if domain.owner is not None and domain.owner.proxy == proxy:
                    return name, domain.name
        raise AssertionError(f"no VM for {proxy}")


def new_vm(repo: Repo, proxy_name: str, host_name: str) -> NewVm:
    """The NewVm the planner would resolve for ``proxy_name`` on ``host_name``."""
    proxy = repo.proxy(proxy_name)
    host = repo.fleet.host(host_name)
    image = repo.fleet.image(proxy.placement.image) if proxy is not None else None
    machine = repo.fleet.machine_type(proxy.placement.machine_type) if proxy is not None else None
    assert proxy is not None and host is not None and image is not None and machine is not None
    return NewVm.of(repo.fleet.name, proxy, host, image, machine)
