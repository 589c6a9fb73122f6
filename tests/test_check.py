"""The VM check: addresses first, then a probe through each until one answers."""

from __future__ import annotations

import logging

import pytest
from enginefakes import FakeTime

from reconciler.adapters.hypervisor.fakehost import FakeHypervisor
from reconciler.adapters.surface.probe import FakeProber
from reconciler.engine.check import check_vm
from reconciler.errors import PermanentError, TransientError
from reconciler.model import DomainState
from reconciler.model.fleet import HealthCheck as ProbeSettings
from reconciler.model.report import Health
from reconciler.model.settings import ApplySettings

SETTINGS = ApplySettings(poll_interval=5)


def host_with(domain: str, *ips: str) -> FakeHypervisor:
    host = FakeHypervisor("kvm01")
    host.add_domain(domain, DomainState.RUNNING)
    host.addresses_of[domain] = ips
    return host


def test_the_first_address_that_answers_makes_the_vm_healthy() -> None:
    host = host_with("vm", "192.0.2.1", "192.0.2.2")
    prober = FakeProber()
    prober.unhealthy.add("192.0.2.1")
    clock = FakeTime()

    result = check_vm(
        host, "vm", ProbeSettings(), prober, wait=0, settings=SETTINGS, runtime=clock.runtime()
    )

    assert (result.ip, result.health) == ("192.0.2.2", Health.HEALTHY)
    assert prober.calls == ["192.0.2.1", "192.0.2.2"]


def test_a_transient_address_error_is_waited_out() -> None:
    host = host_with("vm", "192.0.2.1")
    host.fail("addresses", TransientError("agent not ready"), times=2, target="vm")
    clock = FakeTime()

    result = check_vm(
        host,
        "vm",
        ProbeSettings(),
        FakeProber(),
        wait=60,
        settings=SETTINGS,
        runtime=clock.runtime(),
    )

    assert result.health is Health.HEALTHY
    assert clock.sleeps == [5, 5]


def test_each_transient_address_error_of_a_wait_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    # The wait keeps only the last detail: what the host said meanwhile (libvirt's socket
    # missing while libvirtd restarts) must still be in the log.
    host = host_with("vm", "192.0.2.1")
    missing = TransientError("libvirt's socket /run/x is missing on kvm01", host="kvm01")
    host.fail("addresses", missing, target="vm")
    host.fail("addresses", TransientError("agent not ready"), target="vm")
    clock = FakeTime()

    with caplog.at_level(logging.DEBUG, logger="reconciler.engine.check"):
        result = check_vm(
            host,
            "vm",
            ProbeSettings(),
            FakeProber(),
            wait=60,
            settings=SETTINGS,
            runtime=clock.runtime(),
        )

    assert result.health is Health.HEALTHY
    said = [r.getMessage() for r in caplog.records]
    assert any("vm on kvm01" in m and "socket /run/x is missing" in m for m in said), said
    assert any("agent not ready" in m for m in said), said


def test_a_permanent_address_error_ends_the_wait_at_once() -> None:
    host = host_with("vm", "192.0.2.1")
    host.fail("addresses", PermanentError("no guest agent channel"), target="vm")
    clock = FakeTime()

    result = check_vm(
        host,
        "vm",
        ProbeSettings(),
        FakeProber(),
        wait=60,
        settings=SETTINGS,
        runtime=clock.runtime(),
    )

    assert result.health is Health.UNKNOWN
    assert "no guest agent channel" in result.detail
    assert clock.sleeps == []


def test_an_unhealthy_vm_is_probed_until_the_wait_ends_and_says_why() -> None:
    host = host_with("vm", "192.0.2.1")
    prober = FakeProber()
    prober.unhealthy.add("192.0.2.1")
    clock = FakeTime()

    result = check_vm(
        host, "vm", ProbeSettings(), prober, wait=12, settings=SETTINGS, runtime=clock.runtime()
    )

    assert (result.ip, result.health) == ("192.0.2.1", Health.UNHEALTHY)
    assert result.detail.startswith("192.0.2.1: HTTP 503")
    assert clock.sleeps == [5, 5]
    assert len(prober.calls) == 3


def test_a_vanished_domain_is_reported_as_not_found() -> None:
    host = FakeHypervisor("kvm01")

    result = check_vm(
        host,
        "vm",
        ProbeSettings(),
        FakeProber(),
        wait=60,
        settings=SETTINGS,
        runtime=FakeTime().runtime(),
    )

    assert not result.found
