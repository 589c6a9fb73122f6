"""A fleet of two proxies over fake hypervisors whose engine publishes its names through
the publisher it is given: the fake zone (tests/test_endpoints_engine.py) or a real BIND
(tests/integration/test_dns_bind.py)."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

from enginefakes import FLEET, HOST, PROXY, FakeTime

from reconciler.adapters.hypervisor.fakehost import Call, FakeHypervisor
from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli import compose
from reconciler.model.report import RunReport
from reconciler.model.settings import ApplySettings
from reconciler.ports.dns import EndpointPublisher

HOSTS = ("kvm01", "kvm02")


class World:
    def __init__(self, root: Path, publisher: EndpointPublisher | None) -> None:
        self.root = root
        self.time = FakeTime()
        self.prober = FakeProber()
        self.publisher = publisher
        numbers = itertools.count(10)
        self.hosts = {name: self._host(name, numbers) for name in HOSTS}
        self.engine = compose.engine(
            lambda host: self.hosts[host.name],
            images=FakeImages(),
            prober=self.prober,
            settings=ApplySettings(observe_timeout=2.0, replace_timeout=30.0),
            runtime=self.time.runtime(threading.Event()),
            endpoints=publisher,
        )

    @staticmethod
    def _host(name: str, numbers: itertools.count[int]) -> FakeHypervisor:
        fake = FakeHypervisor(name)

        def give_ip(call: Call) -> None:  # a created VM gets an address, as DHCP would
            if call.method == "create" and call.target not in fake.addresses_of:
                fake.addresses_of[call.target] = (f"198.51.100.{next(numbers)}",)

        fake.on_call = give_ip
        return fake

    def write(self, *proxies: str, hostname_prefix: str = "") -> None:
        hosts = "".join(HOST.replace("NAME", h) for h in HOSTS)
        (self.root / "fleet.yaml").write_text(FLEET.replace("HOSTS\n", hosts))
        text = "".join(PROXY.replace("NAME", p) for p in proxies)
        (self.root / "proxies.yaml").write_text(
            text.replace("hostname: ", f"hostname: {hostname_prefix}")
        )

    def cycle(self, revision: str = "r1") -> RunReport:
        return self.engine.reconcile_once(self.root, revision=revision)

    def ip(self, report: RunReport, proxy: str) -> str:
        return next(p.ip for p in report.proxies if p.name == proxy)
