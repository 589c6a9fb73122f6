"""Whole cycles over the host adapter's own fake (reconciler.adapters.hypervisor.fakehost).

FakeHypervisor keeps the real adapter's rules (image ensured before create,
idempotent create, delete of foreign domains refused), so these cycles check
that the engine calls hosts in an order a real host accepts.
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest
from enginefakes import FLEET, HOST, PROXY, FakeTime

from reconciler.adapters.hypervisor.fakehost import Call, FakeHypervisor
from reconciler.adapters.hypervisor.images.fakeimages import IMAGE_BYTES, FakeImages
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli import compose
from reconciler.errors import TransientError
from reconciler.model import ActionKind, DomainState
from reconciler.model.inventory import Capacity
from reconciler.model.report import ActionResult, Health, RunReport, RunResult
from reconciler.model.settings import ApplySettings
from reconciler.model.vm import base_marker_name

HOSTS = ("kvm01", "kvm02")


class World:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.time = FakeTime()
        self.prober = FakeProber()
        self.numbers = itertools.count(10)  # one range for all hosts: every VM its own IP
        self.hosts = {name: self._host(name) for name in HOSTS}
        self.engine = compose.engine(
            lambda host: self.hosts[host.name],
            images=FakeImages(),
            prober=self.prober,
            settings=ApplySettings(observe_timeout=2.0),
            runtime=self.time.runtime(threading.Event()),
        )

    def _host(self, name: str) -> FakeHypervisor:
        fake = FakeHypervisor(name)
        numbers = self.numbers

        def give_ip(call: Call) -> None:  # a created VM gets an address, as DHCP would
            if call.method == "create" and call.target not in fake.addresses_of:
                fake.addresses_of[call.target] = (f"198.51.100.{next(numbers)}",)

        fake.on_call = give_ip
        return fake

    def write(
        self, *proxies: str, hostname_suffix: str = "", protected: tuple[str, ...] = ()
    ) -> None:
        host_text = "".join(HOST.replace("NAME", h) for h in HOSTS)
        (self.root / "fleet.yaml").write_text(FLEET.replace("HOSTS\n", host_text))
        protect = "  lifecycle:\n    protect: true\n"
        text = "".join(PROXY.replace("NAME", p) + (protect * (p in protected)) for p in proxies)
        (self.root / "proxies.yaml").write_text(
            text.replace("hostname: ", f"hostname: {hostname_suffix}")
        )

    def cycle(self, revision: str = "r1") -> RunReport:
        return self.engine.reconcile_once(self.root, revision=revision)

    def mutations(self) -> list[tuple[str, Call]]:
        return [(name, call) for name, host in self.hosts.items() for call in host.mutations]

    def forget(self) -> None:
        for host in self.hosts.values():
            host.forget()


@pytest.fixture
def world(tmp_path: Path) -> World:
    w = World(tmp_path)
    w.write("web-1", "web-2", "web-3")
    return w


def test_a_second_cycle_over_an_unchanged_world_makes_no_mutating_call(world: World) -> None:
    first = world.cycle()
    assert first.result is RunResult.SUCCESS
    assert sorted(c.method for _, c in world.mutations()) == ["create"] * 3 + ["ensure_image"] * 2
    world.forget()

    second = world.cycle()

    assert world.mutations() == []
    assert second.outcomes == ()
    assert [p.health for p in second.proxies] == [Health.HEALTHY] * 3


def test_a_changed_spec_is_replaced_new_vm_first_and_then_the_cycle_is_quiet(world: World) -> None:
    world.cycle()
    world.write("web-1", "web-2", "web-3", hostname_suffix="v2-")
    world.forget()
    made: dict[str, int] = {}  # new domain -> run that created it
    gone: dict[str, int] = {}  # old domain -> run that deleted it
    replaced: dict[str, str] = {}  # old domain -> new domain

    for run in range(12):  # each run acts and returns; the rollout goes on run by run
        report = world.cycle("r2")
        assert {o.result for o in report.outcomes} <= {ActionResult.SUCCEEDED}
        for outcome in report.outcomes:
            if outcome.action.kind is ActionKind.REPLACE:
                new, old = outcome.action.domain, outcome.action.replaces.domain  # type: ignore[union-attr]
                replaced[old] = new or ""
        for host in world.hosts.values():
            for call in host.mutations:
                if call.method == "create":
                    made[call.target] = run
                if call.method == "delete":
                    gone[call.target] = run
        world.forget()
        if not report.outcomes:
            break

    assert len(replaced) == 3 and set(gone) == set(replaced)
    for old, new in replaced.items():
        assert made[new] < gone[old], (old, new)  # never in the run that made the new VM
    world.cycle("r2")
    assert world.mutations() == []


def test_protect_turned_on_is_recorded_in_the_vm_and_outlives_its_manifest(world: World) -> None:
    world.cycle()
    world.write("web-1", "web-2", "web-3", protected=("web-2",))
    world.forget()

    relabelled = world.cycle("r2")

    (outcome,) = relabelled.outcomes
    assert (outcome.action.kind, outcome.action.proxy, outcome.result) == (
        ActionKind.RELABEL,
        "web-2",
        ActionResult.SUCCEEDED,
    )
    host, domain = outcome.action.host or "", outcome.action.domain or ""
    owner = world.hosts[host].domains[domain].owner
    assert owner is not None and owner.protect and owner.revision == "r1"
    assert world.mutations() == [(host, Call("set_owner", domain))]
    world.forget()
    assert world.cycle("r2").outcomes == ()
    assert world.mutations() == []

    world.write("web-1", "web-3")  # web-2's manifest is deleted; prune is on
    pruned = world.cycle("r3")

    assert domain in world.hosts[host].domains
    assert world.mutations() == []
    (blocked,) = [a for a in pruned.plan.actions if a.proxy == "web-2"]  # type: ignore[union-attr]
    assert (blocked.blocks, blocked.reason) == (ActionKind.DELETE, "protected (lifecycle.protect)")


def test_an_unreachable_host_blocks_its_deletes_and_its_proxies(world: World) -> None:
    world.cycle()
    world.hosts["kvm02"].unreachable = True
    world.write("web-1")  # web-2 and web-3 are gone from the repo
    world.forget()

    report = world.cycle("r2")

    assert all(name == "kvm01" for name, _ in world.mutations())
    assert len(world.hosts["kvm02"].domains) == 1
    assert [h.reachable for h in report.hosts] == [True, False]


def test_transient_failures_are_retried_and_a_shut_off_vm_is_started(world: World) -> None:
    world.cycle()
    (domain,) = [d for d in world.hosts["kvm02"].domains]
    world.hosts["kvm02"].set_state(domain, DomainState.SHUTOFF)
    world.hosts["kvm02"].fail("start", TransientError("libvirtd busy", host="kvm02"), times=2)
    world.forget()

    report = world.cycle()

    (outcome,) = report.outcomes
    assert (outcome.action.kind, outcome.result, outcome.attempts) == (
        ActionKind.START,
        ActionResult.SUCCEEDED,
        3,
    )
    assert world.hosts["kvm02"].domains[domain].state is DomainState.RUNNING
    assert world.time.sleeps[:2] == [1.5, 3.0]


def test_a_crashed_vm_started_again_says_so_in_the_runs_status(world: World) -> None:
    world.cycle()
    (domain,) = [d for d in world.hosts["kvm02"].domains]
    world.hosts["kvm02"].set_state(domain, DomainState.CRASHED)

    report = world.cycle()

    (status,) = [p for p in report.proxies if p.domain == domain]
    assert status.state == "running"
    assert "crashed" in status.detail and "starts it (restart 1)" in status.detail, status


def test_proxies_whose_replace_waits_for_a_later_batch_are_reported_as_their_old_vm(
    world: World,
) -> None:
    world.cycle()
    before = {p.name: p.domain for p in world.cycle().proxies}
    world.write("web-1", "web-2", "web-3", hostname_suffix="v2-")

    report = world.cycle()  # one replace at a time: web-2 and web-3 wait, blocked

    waiting = [p for p in report.proxies if p.name != "web-1"]
    assert [(p.state, p.health, p.domain) for p in waiting] == [
        ("running", Health.HEALTHY, before[p.name]) for p in waiting
    ]
    assert all("batch" in p.detail for p in waiting), waiting


def test_a_foreign_domain_is_never_touched(world: World) -> None:
    world.hosts["kvm01"].add_domain("someone-elses-vm", DomainState.RUNNING)

    world.cycle()
    world.write()  # an empty repo: blocked by allowEmpty=false anyway
    world.cycle("r2")

    assert "someone-elses-vm" in world.hosts["kvm01"].domains
    assert all(c.target != "someone-elses-vm" for _, c in world.mutations())


def test_one_connection_per_host_lasts_until_the_engine_closes(world: World) -> None:
    world.cycle()
    world.cycle()
    assert [h.closed for h in world.hosts.values()] == [0, 0]
    world.engine.close()
    assert [h.closed for h in world.hosts.values()] == [1, 1]


def test_the_engine_sizes_a_missing_base_before_planning_and_places_where_disk_and_base_fit(
    world: World,
) -> None:
    """kvm01 (first by name) lacks the base and its pool holds the 4 GiB disk but not the
    345 MiB base as well; kvm02 holds the base. Once both hold it, nothing is sized."""
    images = world.engine.images
    assert isinstance(images, FakeImages)
    base = "base-debian-12-abababababab.qcow2"
    free = 4 * 2**30 + IMAGE_BYTES // 2
    for fake in world.hosts.values():
        fake.capacity = Capacity(
            cpus=8, memory_mib=16384, pool_capacity_bytes=2**40, pool_available_bytes=free
        )
    world.hosts["kvm02"].add_volumes(base, base_marker_name(base))
    world.write("web-1")

    first = world.cycle()

    (create,) = first.plan.of_kind(ActionKind.CREATE)
    assert create.host == "kvm02", create.reason
    assert images.sized == ["debian-12"]
    assert images.calls == ["debian-12"]  # fetched for the create, not for sizing

    world.hosts["kvm01"].add_volumes(base, base_marker_name(base))
    world.write("web-1", "web-2")
    second = world.cycle()

    (create,) = second.plan.of_kind(ActionKind.CREATE)
    assert create.host == "kvm01" and "base image" not in create.reason
    assert images.sized == ["debian-12"]  # every host holds its base: nothing to size
