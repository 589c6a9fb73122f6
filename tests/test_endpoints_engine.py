"""The engine's report step publishes the proxies' names (reconciler.engine.endpoints),
here into the in-memory zone of ``FakePublisher`` over fake hypervisors; the RFC 2136
adapter itself is tested against a real BIND (tests/integration/test_dns_bind.py)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from enginefakes import FLEET, HOST, PROXY, FakeImages, FakeProber, FakeTime

from reconciler.adapters.dns.fakepublisher import FakePublisher
from reconciler.adapters.hypervisor.fakehost import Call, FakeHypervisor
from reconciler.core.endpoints.records import Member
from reconciler.engine.reconcile import Engine
from reconciler.model.report import Condition, DnsOutcome, DnsResult, RunReport, RunResult
from reconciler.model.settings import ApplySettings

HOSTS = ("kvm01", "kvm02")


class World:
    def __init__(self, root: Path, publisher: FakePublisher | None) -> None:
        self.root = root
        self.time = FakeTime()
        self.prober = FakeProber()
        self.publisher = publisher
        numbers = itertools.count(10)
        self.hosts = {name: self._host(name, numbers) for name in HOSTS}
        self.engine = Engine(
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


@pytest.fixture
def world(tmp_path: Path) -> World:
    w = World(tmp_path, FakePublisher())
    w.write("web-1", "web-2")
    return w


def dns_condition(report: RunReport) -> Condition:
    return next(c for c in report.conditions if c.type == "DnsPublished")


def test_a_run_publishes_each_proxy_and_its_zone_and_says_so(world: World) -> None:
    report = world.cycle()

    assert report.dns == DnsOutcome(DnsResult.PUBLISHED, records=3, changes=3)
    assert dns_condition(report) == Condition("DnsPublished", True, "Published", "3 name(s) owned")
    assert world.publisher is not None
    first, second = world.ip(report, "web-1"), world.ip(report, "web-2")
    assert world.publisher.addresses("web-1") == (first,)
    assert sorted(world.publisher.addresses("a.zone")) == sorted([first, second])
    assert world.cycle().dns == DnsOutcome(DnsResult.UNCHANGED, records=3)


def test_a_replace_moves_the_name_only_once_the_new_vm_is_healthy(world: World) -> None:
    old = world.ip(world.cycle(), "web-1")
    world.prober.healthy_only = {old, world.ip(world.cycle(), "web-2")}  # new VMs fail
    world.write("web-1", "web-2", hostname_prefix="v2-")

    halted = world.cycle("r2")

    assert halted.result is RunResult.PARTIAL
    assert world.publisher is not None
    assert world.publisher.addresses("web-1") == (old,)
    world.prober.healthy_only = None
    world.write("web-1", "web-2", hostname_prefix="v3-")

    moved = world.cycle("r3")

    new = world.ip(moved, "web-1")
    assert new != old
    assert world.publisher.addresses("web-1") == (new,)
    assert old not in world.publisher.addresses("a.zone")


def test_an_unhealthy_proxy_leaves_its_zones_name_at_the_next_run(world: World) -> None:
    report = world.cycle()
    sick = world.ip(report, "web-2")
    world.prober.unhealthy = {sick}

    world.cycle()

    assert world.publisher is not None
    assert world.publisher.addresses("a.zone") == (world.ip(report, "web-1"),)
    assert world.publisher.addresses("web-2") == (sick,)


def test_a_dns_server_that_refuses_is_a_false_condition_and_vms_are_still_reconciled(
    world: World,
) -> None:
    assert world.publisher is not None
    world.publisher.failure = DnsOutcome(
        DnsResult.FAILED, rcode="NOTAUTH (BADSIG)", error="update refused the key"
    )

    report = world.cycle()

    assert report.result is RunResult.SUCCESS
    assert [p.state for p in report.proxies] == ["running", "running"]
    assert dns_condition(report) == Condition(
        "DnsPublished", False, "UpdateRefused", "rcode NOTAUTH (BADSIG): update refused the key"
    )
    ready = next(c for c in report.conditions if c.type == "Ready")
    assert ready.status


class Broken:
    def publish(self, fleet: str, members: Sequence[Member]) -> DnsOutcome:
        raise RuntimeError("a bug in the publisher")


def test_a_publisher_bug_is_a_failed_publish_not_a_failed_run(tmp_path: Path) -> None:
    world = World(tmp_path, None)
    world.engine.endpoints = Broken()
    world.write("web-1")

    report = world.cycle()

    assert report.result is RunResult.SUCCESS
    assert report.dns == DnsOutcome(DnsResult.FAILED, error="RuntimeError: a bug in the publisher")


def test_without_dns_nothing_is_published_and_no_condition_is_added(tmp_path: Path) -> None:
    world = World(tmp_path, None)
    world.write("web-1")

    report = world.cycle()

    assert report.dns is None
    assert "DnsPublished" not in {c.type for c in report.conditions}
