"""Image updates over whole cycles on the host adapter's own fake: content-named bases,
the takeover of a pool laid out by key, and the removal of bases nobody uses.

FakeHypervisor keeps the real adapter's rule for removal (a base a domain's
disk names is kept, without an error), so these cycles show what an operator
sees on a host: the old base stays while a VM backs onto it, and goes after.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import pytest
from enginefakes import FakeTime
from test_reconcile_fakehost import World

from reconciler.adapters.hypervisor.fakehost import Call, FakeHypervisor
from reconciler.adapters.hypervisor.images.download import CachedImage
from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.surface.probe import FakeProber
from reconciler.engine.executor import Executor
from reconciler.model import Action, ActionKind, DomainState, Image, Plan
from reconciler.model.plan import RemoveBase
from reconciler.model.report import ActionOutcome, ActionResult, RunResult
from reconciler.model.settings import ApplySettings

OLD_SHA, NEW_SHA = "ab" * 32, "cd" * 32
OLD_BASE, NEW_BASE = "base-debian-12-abababababab.qcow2", "base-debian-12-cdcdcdcdcdcd.qcow2"
LEGACY = "base-debian-12.qcow2"
URL = "url: https://images.example.test/debian-12.qcow2"


class PinnedWorld(World):
    """The engine tests' world with debian-12 pinned to a sha256 that a test may change."""

    sha256 = OLD_SHA

    def write(
        self, *proxies: str, hostname_suffix: str = "", protected: tuple[str, ...] = ()
    ) -> None:
        super().write(*proxies, hostname_suffix=hostname_suffix, protected=protected)
        fleet = self.root / "fleet.yaml"
        # The engine tests' fleet already pins "ab" * 32 (the schema requires a sha256).
        fleet.write_text(fleet.read_text().replace(f"sha256: {OLD_SHA}", f"sha256: {self.sha256}"))


class UpdatedImages(FakeImages):
    """A cache that verifies whatever sha256 the image pins (FakeImages always says ab...)."""

    def fetch(self, image: Image) -> CachedImage:
        fetched = super().fetch(image)
        return CachedImage(fetched.path, image.sha256 or fetched.sha256, fetched.size)


@pytest.fixture
def world(tmp_path: Path) -> PinnedWorld:
    w = PinnedWorld(tmp_path)
    w.engine.images = UpdatedImages()
    w.write("web-1", "web-2")
    assert w.cycle().result is RunResult.SUCCESS
    return w


def bases(fake: FakeHypervisor) -> set[str]:
    return {v for v in fake.volumes if v.startswith("base-")}


def test_an_image_update_replaces_the_vms_and_removes_the_old_base_a_cycle_later(
    world: PinnedWorld,
) -> None:
    on = {name for name, fake in world.hosts.items() if fake.domains}
    assert all(bases(world.hosts[h]) == {OLD_BASE, f"{OLD_BASE}.sha256"} for h in on)
    world.sha256 = NEW_SHA
    world.write("web-1", "web-2")
    world.forget()

    done: list[tuple[ActionKind, ActionResult]] = []
    for _ in range(10):  # runs act and return: replace, then the old VMs, then the old base
        report = world.cycle("r2")
        kinds = [(o.action.kind, o.result) for o in report.outcomes]
        for outcome in report.outcomes:
            if outcome.action.kind is ActionKind.CLEANUP:  # no VM of its host is on it now
                assert OLD_BASE not in world.hosts[outcome.action.host or ""].overlays.values()
        for outcome in report.outcomes:
            if outcome.action.kind is ActionKind.REPLACE:  # its old VM still runs on the old base
                assert {OLD_BASE, NEW_BASE} <= bases(world.hosts[outcome.action.host or ""])
        done += kinds
        if not kinds:
            break

    assert done.count((ActionKind.REPLACE, ActionResult.SUCCEEDED)) == 2
    assert done.count((ActionKind.CLEANUP, ActionResult.SUCCEEDED)) == len(on)
    for name in on:
        fake = world.hosts[name]
        assert Call("ensure_image", "debian-12") in fake.mutations
        assert set(fake.overlays.values()) == {NEW_BASE}
        assert bases(fake) == {NEW_BASE, f"{NEW_BASE}.sha256"}
    world.forget()
    assert world.cycle("r2").outcomes == ()
    assert world.mutations() == []


def test_a_pool_laid_out_by_key_is_taken_over_without_replacing_its_vms(
    world: PinnedWorld,
) -> None:
    """VMs made before content names back onto base-<key>.<format> and record no base."""
    for fake in world.hosts.values():
        for name, domain in list(fake.domains.items()):
            assert domain.owner is not None
            fake.domains[name] = replace(domain, owner=replace(domain.owner, image_base=""))
            fake.overlays[name] = LEGACY
        if fake.domains:
            fake.volumes -= {OLD_BASE, f"{OLD_BASE}.sha256"}
            fake.images = {LEGACY: OLD_SHA}
            fake.add_volumes(LEGACY, f"{LEGACY}.sha256")
    world.write("web-1", "web-2", "web-3")
    world.forget()

    report = world.cycle("r2")

    assert [(o.action.kind, o.action.proxy) for o in report.outcomes] == [
        (ActionKind.CREATE, "web-3")
    ]
    (host,) = [h for h in world.hosts.values() if "web-3" in str(h.specs)]
    assert host.overlays[report.outcomes[0].action.domain or ""] == OLD_BASE
    world.write("web-3")
    fleet = world.root / "fleet.yaml"  # two of three proxies go: a shrink to acknowledge
    fleet.write_text(
        fleet.read_text().replace("prune: true", "prune: true\n    acknowledgeShrinkTo: 1")
    )
    world.forget()

    world.cycle("r3")  # web-1 and web-2 go; their legacy base is still recorded
    report = world.cycle("r3")

    removed = [o.action.volumes for o in report.outcomes if o.action.kind is ActionKind.CLEANUP]
    assert (LEGACY, f"{LEGACY}.sha256") in removed
    assert all(LEGACY not in h.volumes for h in world.hosts.values())
    assert OLD_BASE in host.volumes


def remove_base(base: str) -> Action:
    return RemoveBase(reason="unused", host="kvm01", base=base, volumes=(base, f"{base}.sha256"))


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


def test_the_executor_keeps_a_base_a_foreign_domain_took_after_the_plan_and_succeeds() -> None:
    fake = FakeHypervisor("kvm01")
    fake.add_volumes(OLD_BASE, f"{OLD_BASE}.sha256")
    fake.add_domain("rescue-vm", DomainState.SHUTOFF)
    fake.add_volumes("rescue-vm.qcow2", OLD_BASE, used_by="rescue-vm")

    (outcome,) = execute(fake, remove_base(OLD_BASE))

    assert outcome.result is ActionResult.SUCCEEDED
    assert {OLD_BASE, f"{OLD_BASE}.sha256"} <= fake.volumes
    assert fake.mutations == []


def test_the_executor_removes_an_unused_base_marker_first() -> None:
    fake = FakeHypervisor("kvm01")
    fake.add_volumes(OLD_BASE, f"{OLD_BASE}.sha256", NEW_BASE)

    (outcome,) = execute(fake, remove_base(OLD_BASE))

    assert outcome.result is ActionResult.SUCCEEDED
    assert fake.volumes == {NEW_BASE}
    assert fake.mutations == [Call("remove_unused_base", OLD_BASE)]
