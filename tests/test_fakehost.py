"""FakeHypervisor keeps the real adapter's rules, so executor tests mean what they say."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from reconciler.adapters.hypervisor.fakehost import Call, FakeHypervisor
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
from reconciler.ports.hypervisor import Hypervisor

IMAGE = Image(key="debian", url="https://example.test/d.qcow2", sha256="a" * 64)
CACHE = Path("/cache/debian")
OLD_NEW = ("base-debian-aaaaaaaaaaaa.qcow2", "base-debian-bbbbbbbbbbbb.qcow2")


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


def test_a_new_sha256_is_a_new_base_beside_the_old_one_that_its_overlay_keeps() -> None:
    fake = running()
    changed = Image(key="debian", url=IMAGE.url, sha256="b" * 64)

    fake.ensure_image(changed, CACHE)

    assert fake.images == {"base-debian-aaaaaaaaaaaa.qcow2": "a" * 64, OLD_NEW[1]: "b" * 64}
    assert {*OLD_NEW, *(f"{b}.sha256" for b in OLD_NEW)} <= fake.volumes
    assert fake.overlays == {spec().domain: "base-debian-aaaaaaaaaaaa.qcow2"}


def test_a_changed_download_of_an_unpinned_image_in_use_is_not_uploaded_but_a_free_one_is() -> None:
    unpinned = replace(IMAGE, sha256=None)
    fake = FakeHypervisor("kvm1")
    fake.ensure_image(unpinned, CACHE)
    fake.create(spec(image=unpinned))

    with pytest.raises(PermanentError, match="base image in use by 1 overlays"):
        fake.ensure_image(unpinned, Path("/cache/debian-newer"))

    fake.delete(spec().domain)
    fake.ensure_image(unpinned, Path("/cache/debian-newer"))
    assert fake.images["base-debian.qcow2"] == "file:/cache/debian-newer"


def test_an_unused_base_and_its_marker_are_removed_but_one_an_overlay_uses_is_kept() -> None:
    fake = running()
    fake.ensure_image(replace(IMAGE, sha256="b" * 64), CACHE)
    fake.forget()

    assert fake.remove_unused_base(OLD_NEW[0]) == ()
    assert fake.remove_unused_base(OLD_NEW[1]) == (f"{OLD_NEW[1]}.sha256", OLD_NEW[1])

    assert OLD_NEW[0] in fake.volumes and OLD_NEW[1] not in fake.volumes
    assert fake.mutations == [Call("remove_unused_base", OLD_NEW[1])]


def test_a_base_a_foreign_domain_names_is_kept_and_a_strange_name_is_refused() -> None:
    fake = FakeHypervisor("kvm1")
    fake.add_volumes("base-old.qcow2", "base-old.qcow2.sha256")
    fake.add_domain("someone-elses", DomainState.SHUTOFF)
    fake.add_volumes("someone-elses.qcow2", "base-old.qcow2", used_by="someone-elses")

    assert fake.remove_unused_base("base-old.qcow2") == ()
    with pytest.raises(PermanentError, match="not a base volume name"):
        fake.remove_unused_base("someone-elses.qcow2")

    assert fake.mutations == []
    assert {"base-old.qcow2", "base-old.qcow2.sha256"} <= fake.volumes


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
