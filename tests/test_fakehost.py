"""FakeHypervisor keeps the real adapter's rules, so executor tests mean what they say."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from reconciler.adapters.fakehost import Call, FakeHypervisor
from reconciler.adapters.host import Hypervisor
from reconciler.errors import NotFoundError, PermanentError, TransientError
from reconciler.model import (
    CloudInit,
    DomainState,
    Host,
    HostNetwork,
    Image,
    MachineType,
    Owner,
)
from reconciler.model.vm import VmSpec

IMAGE = Image(key="debian", url="https://example.test/d.qcow2", sha256="a" * 64)
CACHE = Path("/cache/debian")


def spec(proxy: str = "web-1", image: Image = IMAGE) -> VmSpec:
    host = Host(name="kvm1", address="kvm1.test", zone="z", network=HostNetwork("bridge", "br0"))
    return VmSpec(
        domain=f"pf-home-{proxy}-0123abcd",
        proxy=proxy,
        host=host,
        image=image,
        machine_type=MachineType("small", 1, 512, 4),
        cloud_init=CloudInit(user_data="#cloud-config\n"),
        install_guest_agent=True,
        owner=Owner(fleet="home", proxy=proxy, digest="0123abcd" * 8),
    )


def running(proxy: str = "web-1") -> FakeHypervisor:
    fake = FakeHypervisor("kvm1")
    fake.ensure_image(IMAGE, CACHE)
    fake.create(spec(proxy))
    fake.forget()
    return fake


def test_the_fake_satisfies_the_hypervisor_protocol() -> None:
    host: Hypervisor = FakeHypervisor("kvm1")

    assert host.name == "kvm1"


def test_create_runs_an_owned_domain_that_observe_reports() -> None:
    fake = FakeHypervisor("kvm1")
    fake.ensure_image(IMAGE, CACHE)

    fake.create(spec())

    (domain,) = fake.observe().domains
    assert domain.state is DomainState.RUNNING
    assert domain.owner == spec().owner
    assert fake.mutations == [Call("ensure_image", "debian"), Call("create", spec().domain)]


def test_create_before_the_image_is_ensured_fails_permanently() -> None:
    with pytest.raises(PermanentError, match="must be ensured first"):
        FakeHypervisor("kvm1").create(spec())


def test_a_second_create_and_ensure_are_no_mutation_but_a_stopped_domain_is_started() -> None:
    fake = running()

    fake.ensure_image(IMAGE, CACHE)
    fake.create(spec())
    assert fake.mutations == []

    fake.set_state(spec().domain, DomainState.SHUTOFF)
    fake.create(spec())
    assert fake.mutations == [Call("create", spec().domain)]
    assert fake.observe().domains[0].state is DomainState.RUNNING


def test_a_base_in_use_is_not_replaced_but_a_free_one_is() -> None:
    fake = running()
    changed = Image(key="debian", url=IMAGE.url, sha256="b" * 64)

    with pytest.raises(PermanentError, match="base image in use by 1 overlays"):
        fake.ensure_image(changed, CACHE)

    fake.delete(spec().domain)
    fake.ensure_image(changed, CACHE)
    assert fake.images["debian"] == "b" * 64


def test_delete_of_a_gone_domain_succeeds_without_mutation_and_a_foreign_one_is_refused() -> None:
    fake = FakeHypervisor("kvm1")
    fake.add_domain("someone-elses", DomainState.SHUTOFF)

    fake.delete("pf-home-gone-00000000")
    with pytest.raises(PermanentError, match="no proxyfleet metadata"):
        fake.delete("someone-elses")

    assert fake.mutations == []
    assert [d.name for d in fake.observe().domains] == ["someone-elses"]


def test_set_owner_rewrites_only_the_owner_and_refuses_foreign_or_other_vms() -> None:
    fake = running()
    fake.add_domain("someone-elses", DomainState.SHUTOFF)
    recorded = spec().owner
    protected = replace(recorded, protect=True)

    fake.set_owner(spec().domain, protected)
    fake.set_owner(spec().domain, protected)  # the same again: no mutation
    with pytest.raises(PermanentError, match="refusing to rewrite the owner"):
        fake.set_owner("someone-elses", protected)
    with pytest.raises(PermanentError, match="refusing to rewrite the owner"):
        fake.set_owner(spec().domain, replace(protected, proxy="web-2"))
    with pytest.raises(NotFoundError):
        fake.set_owner("pf-home-gone-00000000", protected)

    seen = {d.name: d for d in fake.observe().domains}
    assert seen[spec().domain].owner == protected
    assert seen[spec().domain].state is DomainState.RUNNING
    assert seen["someone-elses"].owner is None
    assert fake.mutations == [Call("set_owner", spec().domain)]


def test_start_and_addresses_of_a_missing_domain_are_not_found() -> None:
    fake = FakeHypervisor("kvm1")

    with pytest.raises(NotFoundError):
        fake.start("nope")
    with pytest.raises(NotFoundError):
        fake.addresses("nope")


def test_addresses_are_empty_until_set_and_while_the_domain_is_stopped() -> None:
    fake = running()
    assert fake.addresses(spec().domain) == ()

    fake.addresses_of[spec().domain] = ("192.0.2.10",)
    assert fake.addresses(spec().domain) == ("192.0.2.10",)

    fake.set_state(spec().domain, DomainState.SHUTOFF)
    assert fake.addresses(spec().domain) == ()


def test_an_unreachable_fake_fails_every_call_transiently_and_records_it() -> None:
    fake = running()
    fake.unreachable = True

    with pytest.raises(TransientError):
        fake.observe()
    with pytest.raises(TransientError):
        fake.delete(spec().domain)

    assert fake.calls == [Call("observe"), Call("delete", spec().domain)]
    assert fake.mutations == []
    assert spec().domain in fake.domains


def test_a_failure_injected_n_times_fails_exactly_n_matching_calls() -> None:
    fake = running()
    fake.fail("start", TransientError("busy"), times=2, target=spec().domain)
    fake.set_state(spec().domain, DomainState.SHUTOFF)

    for _ in range(2):
        with pytest.raises(TransientError, match="busy"):
            fake.start(spec().domain)
    fake.start(spec().domain)

    assert fake.observe().domains[0].state is DomainState.RUNNING


def test_a_permanent_failure_without_a_count_never_stops() -> None:
    fake = FakeHypervisor("kvm1")
    fake.fail("ensure_image", PermanentError("disk full"), times=None)

    for _ in range(3):
        with pytest.raises(PermanentError, match="disk full"):
            fake.ensure_image(IMAGE, CACHE)
    assert fake.images == {}


def test_a_failure_for_one_target_leaves_the_others_alone() -> None:
    fake = FakeHypervisor("kvm1")
    fake.ensure_image(IMAGE, CACHE)
    fake.fail("create", TransientError("nope"), target=spec("web-2").domain)

    fake.create(spec("web-1"))
    with pytest.raises(TransientError):
        fake.create(spec("web-2"))
    fake.create(spec("web-2"))

    assert [d.name for d in fake.observe().domains] == [spec("web-1").domain, spec("web-2").domain]


def test_on_call_sees_every_call_before_it_acts() -> None:
    fake = FakeHypervisor("kvm1")
    seen: list[Call] = []
    fake.on_call = seen.append

    fake.observe()
    fake.close()

    assert seen == [Call("observe"), Call("close")]
    assert fake.closed == 1
