"""The engine's report step publishes the proxies' names (reconciler.engine.endpoints),
here into the in-memory zone of ``FakePublisher`` over fake hypervisors; the RFC 2136
adapter itself is tested against a real BIND (tests/integration/test_dns_bind.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from publishworld import World

from reconciler.adapters.dns.fakepublisher import FakePublisher
from reconciler.core.endpoints.records import Member
from reconciler.model.report import Condition, DnsOutcome, DnsResult, RunReport, RunResult


@pytest.fixture
def zone() -> FakePublisher:
    return FakePublisher()


@pytest.fixture
def world(tmp_path: Path, zone: FakePublisher) -> World:
    w = World(tmp_path, zone)
    w.write("web-1", "web-2")
    return w


def dns_condition(report: RunReport) -> Condition:
    return next(c for c in report.conditions if c.type == "DnsPublished")


def test_a_run_publishes_each_proxy_and_its_zone_and_says_so(
    world: World, zone: FakePublisher
) -> None:
    report = world.cycle()

    assert report.dns == DnsOutcome(DnsResult.PUBLISHED, records=3, changes=3)
    assert dns_condition(report) == Condition("DnsPublished", True, "Published", "3 name(s) owned")
    first, second = world.ip(report, "web-1"), world.ip(report, "web-2")
    assert zone.addresses("web-1") == (first,)
    assert sorted(zone.addresses("a.zone")) == sorted([first, second])
    assert world.cycle().dns == DnsOutcome(DnsResult.UNCHANGED, records=3)


def test_a_replace_moves_the_name_only_once_the_new_vm_is_healthy(
    world: World, zone: FakePublisher
) -> None:
    old = world.ip(world.cycle(), "web-1")
    world.prober.healthy_only = {old, world.ip(world.cycle(), "web-2")}  # new VMs fail
    world.write("web-1", "web-2", hostname_prefix="v2-")

    booting = world.cycle("r2")  # creates the new VMs and returns; they never answer yet
    again = world.cycle("r2")

    assert [a.kind.value for a in booting.plan.actions if a.kind.value == "replace"]
    assert zone.addresses("web-1") == (old,)
    assert again.result is RunResult.SUCCESS
    assert zone.addresses("web-1") == (old,)
    world.prober.healthy_only = None

    moved = world.cycle("r2")
    moved = world.cycle("r2")

    new = world.ip(moved, "web-1")
    assert new != old
    assert zone.addresses("web-1") == (new,)
    assert old not in zone.addresses("a.zone")


def test_an_unhealthy_proxy_leaves_its_zones_name_at_the_next_run(
    world: World, zone: FakePublisher
) -> None:
    report = world.cycle()
    sick = world.ip(report, "web-2")
    world.prober.unhealthy = {sick}

    world.cycle()

    assert zone.addresses("a.zone") == (world.ip(report, "web-1"),)
    assert zone.addresses("web-2") == (sick,)


def test_a_dns_server_that_refuses_is_a_false_condition_and_vms_are_still_reconciled(
    world: World, zone: FakePublisher
) -> None:
    zone.failure = DnsOutcome(
        DnsResult.FAILED,
        reason="ServerRefused",
        rcode="NOTAUTH (BADSIG)",
        error="update refused the key",
    )

    report = world.cycle()

    assert report.result is RunResult.SUCCESS
    assert [p.state for p in report.proxies] == ["running", "running"]
    assert dns_condition(report) == Condition(
        "DnsPublished", False, "ServerRefused", "rcode NOTAUTH (BADSIG): update refused the key"
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
    assert report.dns == DnsOutcome(
        DnsResult.FAILED, reason="PublisherBug", error="RuntimeError: a bug in the publisher"
    )


def test_without_dns_nothing_is_published_and_no_condition_is_added(tmp_path: Path) -> None:
    world = World(tmp_path, None)
    world.write("web-1")

    report = world.cycle()

    assert report.dns is None
    assert "DnsPublished" not in {c.type for c in report.conditions}
