"""What the engine's tests share and no adapter package holds: a clock that moves only
when slept on, model builders, and ``FleetRepo``
(a fleet repo on disk over ``FakeHypervisor`` hosts, with an Engine over them).

The hypervisor, image and prober fakes live next to their seams
(reconciler.adapters.hypervisor.fakehost, ...images.fakeimages, ...surface.probe).
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

from reconciler.adapters.hypervisor.fakehost import FakeHypervisor
from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli.compose import engine as Engine
from reconciler.engine.runtime import Runtime
from reconciler.model import (
    CloudInit,
    Fleet,
    Host,
    HostNetwork,
    Image,
    Lifecycle,
    MachineType,
    Placement,
    Policy,
    Proxy,
    Repo,
)
from reconciler.model.plan import NewVm
from reconciler.model.report import RunReport
from reconciler.model.settings import ApplySettings


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


def fake_host(name: str) -> FakeHypervisor:
    """A fake host whose new VMs get an address at once (guests that boot instantly)."""
    return FakeHypervisor(name, auto_ip=True)


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
        self.hosts = {name: fake_host(name) for name in hosts}
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

    def factory(self, host: Host) -> FakeHypervisor:
        self.made.append(host.name)
        return self.hosts.setdefault(host.name, fake_host(host.name))

    def write(self, hosts: tuple[str, ...], proxies: tuple[str, ...], extra: str = "") -> None:
        host_text = "".join(HOST.replace("NAME", h) for h in hosts)
        (self.root / "fleet.yaml").write_text(FLEET.replace("HOSTS\n", host_text))
        text = "".join(PROXY.replace("NAME", p) for p in proxies)
        (self.root / "proxies.yaml").write_text(text + extra)

    def cycle(self, revision: str = "rev1") -> RunReport:
        return self.engine.reconcile_once(self.root, revision=revision)

    def mutating_calls(self) -> list[tuple[str, str, str]]:
        """(host, method, target) of every call that may change a host, changed or not."""
        return [(h, c.method, c.target) for h, host in self.hosts.items() for c in host.requested()]

    def forget_calls(self) -> None:
        for host in self.hosts.values():
            host.forget()

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
