"""Volumes a killed create left behind: planned from the inventory, confirmed on the host.

Cycles run over the host adapter's own fake (reconciler.adapters.hypervisor.fakehost),
which refuses a cleanup exactly where the real adapter does: a name that is
not the domain's, a domain that exists, a volume a domain's disk uses.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from enginefakes import FakeTime
from test_reconcile_fakehost import World

from reconciler.adapters.hypervisor.fakehost import Call, FakeHypervisor
from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.surface.probe import FakeProber
from reconciler.engine.executor import Executor
from reconciler.model import Action, ActionKind, DomainState, Owner, Plan
from reconciler.model.plan import Cleanup
from reconciler.model.report import ActionOutcome, ActionResult, RunResult
from reconciler.model.settings import ApplySettings
from reconciler.model.vm import vm_volumes

BASE = "base-debian-12-abababababab.qcow2"  # the fleet pins sha256 "ab" * 32


class Killed(Exception):
    """Stands for SIGKILL: the process is gone mid-call."""


def kill_create_after_its_volumes(world: World, proxy: str) -> tuple[str, FakeHypervisor]:
    """One cycle in which the create of ``proxy`` dies once its overlay and seed exist."""
    made: list[tuple[str, FakeHypervisor]] = []
    for fake in world.hosts.values():
        previous = fake.on_call

        def die(call: Call, fake: FakeHypervisor = fake, previous: object = previous) -> None:
            if call.method == "create" and f"-{proxy}-" in call.target:
                fake.add_volumes(*vm_volumes(call.target))
                made.append((call.target, fake))
                raise Killed(call.target)
            if callable(previous):
                previous(call)

        fake.on_call = die
    report = world.cycle()
    assert [o.result for o in report.outcomes if o.action.proxy == proxy] == [ActionResult.FAILED]
    (found,) = made
    for fake in world.hosts.values():
        fake.on_call = None
    return found


@pytest.fixture
def world(tmp_path: Path) -> World:
    w = World(tmp_path)
    w.write("web-1", "web-2")
    assert w.cycle().result is RunResult.SUCCESS
    for fake in w.hosts.values():
        fake.add_volumes(BASE)
    return w


def test_volumes_a_killed_create_left_are_removed_once_its_proxy_is_gone(world: World) -> None:
    world.write("web-1", "web-2", "web-3")
    domain, fake = kill_create_after_its_volumes(world, "web-3")
    assert domain not in fake.domains and set(vm_volumes(domain)) <= fake.volumes
    world.write("web-1", "web-2")
    world.forget()

    report = world.cycle("r2")

    assert [(o.action.kind, o.result) for o in report.outcomes] == [
        (ActionKind.CLEANUP, ActionResult.SUCCEEDED)
    ]
    assert report.outcomes[0].action.volumes == vm_volumes(domain)
    assert world.mutations() == [(fake.name, Call("remove_volumes", domain))]
    assert not fake.volumes & set(vm_volumes(domain))
    assert all(BASE in h.volumes for h in world.hosts.values())
    world.forget()
    assert world.cycle("r2").outcomes == ()
    assert world.mutations() == []


def test_volumes_of_a_killed_create_whose_spec_changed_go_and_the_new_vm_comes(
    world: World,
) -> None:
    world.write("web-1", "web-2", "web-3")
    old, fake = kill_create_after_its_volumes(world, "web-3")
    world.write("web-1", "web-2", "web-3", hostname_suffix="new-")

    report = world.cycle("r2")

    kinds = sorted((o.action.kind.value, o.result.value) for o in report.outcomes)
    assert ("cleanup", "succeeded") in kinds and ("create", "succeeded") in kinds
    assert not fake.volumes & set(vm_volumes(old))
    (web3,) = [p for p in report.proxies if p.name == "web-3"]
    assert web3.domain != old and web3.state == "running"


def test_a_killed_create_with_an_unchanged_repo_is_completed_not_cleaned_up(
    world: World,
) -> None:
    world.write("web-1", "web-2", "web-3")
    domain, fake = kill_create_after_its_volumes(world, "web-3")

    report = world.cycle("r1")

    assert [(o.action.kind, o.action.domain) for o in report.outcomes] == [
        (ActionKind.CREATE, domain)
    ]
    assert domain in fake.domains and set(vm_volumes(domain)) <= fake.volumes


def test_a_domain_that_takes_the_volumes_after_the_plan_stops_the_cleanup(world: World) -> None:
    world.write("web-1", "web-2", "web-3")
    domain, fake = kill_create_after_its_volumes(world, "web-3")
    world.write("web-1", "web-2")

    def someone_attaches(call: Call) -> None:
        if call.method == "remove_volumes":
            fake.add_domain("rescue-vm", DomainState.RUNNING)
            fake.add_volumes(vm_volumes(domain)[0], used_by="rescue-vm")

    fake.on_call = someone_attaches
    report = world.cycle("r2")

    (outcome,) = report.outcomes
    assert outcome.result is ActionResult.FAILED
    assert "in use by domain rescue-vm" in outcome.error
    assert set(vm_volumes(domain)) <= fake.volumes
    assert report.result is RunResult.PARTIAL


def cleanup(domain: str, *volumes: str) -> Action:
    return Cleanup(reason="no domain uses them", host="kvm01", domain=domain, volumes=volumes)


def execute(fake: FakeHypervisor, *actions: Action) -> tuple[ActionOutcome, ...]:
    executor = Executor(
        {"kvm01": fake},
        images=FakeImages(),
        prober=FakeProber(),
        revision="c0ffee",
        settings=ApplySettings(),
        runtime=FakeTime().runtime(threading.Event()),
    )
    return executor.run(Plan(actions))


def test_the_executor_refuses_a_cleanup_of_a_domain_that_exists_now() -> None:
    fake = FakeHypervisor("kvm01")
    name = "pf-home-web-9-0123abcd"
    fake.add_volumes(*vm_volumes(name))
    fake.add_domain(name, DomainState.SHUTOFF, Owner("home", "web-9", "0123abcd" * 8))

    (outcome,) = execute(fake, cleanup(name, *vm_volumes(name)))

    assert outcome.result is ActionResult.FAILED
    assert "the domain exists" in outcome.error
    assert set(vm_volumes(name)) <= fake.volumes


def test_the_executor_refuses_volume_names_that_are_not_the_domains_own() -> None:
    fake = FakeHypervisor("kvm01")
    name = "pf-home-web-9-0123abcd"
    fake.add_volumes(BASE, *vm_volumes(name))

    (outcome,) = execute(fake, cleanup(name, vm_volumes(name)[0], BASE))

    assert outcome.result is ActionResult.FAILED
    assert f"refusing to remove {BASE}" in outcome.error
    assert {BASE, *vm_volumes(name)} <= fake.volumes


def test_a_cleanup_whose_volumes_are_gone_already_succeeds_without_a_change() -> None:
    fake = FakeHypervisor("kvm01")
    name = "pf-home-web-9-0123abcd"
    fake.add_volumes(vm_volumes(name)[1])

    (outcome,) = execute(fake, cleanup(name, *vm_volumes(name)))

    assert outcome.result is ActionResult.SUCCEEDED
    assert fake.volumes == set()
    assert fake.mutations == [Call("remove_volumes", name)]


def test_a_cleanup_without_volumes_fails_without_a_host_call() -> None:
    fake = FakeHypervisor("kvm01")

    (outcome,) = execute(fake, cleanup("pf-home-web-9-0123abcd"))

    assert outcome.result is ActionResult.FAILED
    assert "names no volumes" in outcome.error
    assert fake.calls == []
