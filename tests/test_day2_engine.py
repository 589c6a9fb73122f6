"""Day 2 over whole cycles on the host adapter's fake: crashed VMs come back, failing
proxies are replaced, rollouts halt on an unhealthy new VM and resume with a new
commit, and what earlier runs saw survives a restart (history.json)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from test_reconcile_fakehost import World

from reconciler.adapters.state.historystore import FileHistoryStore
from reconciler.cli import compose
from reconciler.core.status import statusdoc
from reconciler.model import DomainState
from reconciler.model.plan import Blocked, Replace, Start
from reconciler.model.report import ActionResult, RunReport


def owned(world: World) -> dict[str, tuple[str, str]]:
    """proxy -> (host, domain) of every owned VM (the last one listed wins)."""
    return {
        d.owner.proxy: (name, d.name)
        for name, host in world.hosts.items()
        for d in host.domains.values()
        if d.owner is not None
    }


def vms_of(world: World, proxy: str) -> list[str]:
    return sorted(
        d.name
        for host in world.hosts.values()
        for d in host.domains.values()
        if d.owner is not None and d.owner.proxy == proxy
    )


def crash(world: World, proxy: str) -> str:
    host, domain = owned(world)[proxy]
    fake = world.hosts[host]
    fake.domains[domain] = dataclasses.replace(
        fake.domains[domain], state=DomainState.SHUTOFF, reason="crashed"
    )
    return domain


def ip_of(world: World, domain: str) -> str:
    return next(h.addresses_of[domain][0] for h in world.hosts.values() if domain in h.domains)


def conditions(report: RunReport) -> dict[str, str]:
    return {c.type: c.message for c in report.conditions if c.status}


@pytest.fixture
def world(tmp_path: Path) -> World:
    w = World(tmp_path / "repo")
    w.root.mkdir()
    w.engine.history = FileHistoryStore(tmp_path / "state" / "history.json")
    w.write("web-1", "web-2", "web-3")
    w.cycle()
    return w


def test_a_crashed_vm_is_started_again_and_replaced_once_it_keeps_crashing(world: World) -> None:
    for round_ in range(3):
        domain = crash(world, "web-1")
        report = world.cycle()
        (outcome,) = report.outcomes
        assert isinstance(outcome.action, Start) and outcome.action.domain == domain
        assert f"restart {round_ + 1}" in outcome.action.reason
        world.time.sleep(60)
    old = crash(world, "web-1")

    report = world.cycle()

    (outcome,) = report.outcomes
    assert isinstance(outcome.action, Replace) and outcome.action.heal
    assert outcome.result is ActionResult.SUCCEEDED
    assert "after 3 restart(s)" in outcome.action.reason
    assert outcome.action.domain != old and old in vms_of(world, "web-1")
    world.cycle()  # the new VM passed its check: the old one goes
    assert vms_of(world, "web-1") == [outcome.action.domain]


def test_a_proxy_failing_its_probe_past_replace_after_is_replaced_and_not_before(
    world: World,
) -> None:
    _, domain = owned(world)["web-2"]
    world.prober.unhealthy.add(ip_of(world, domain))
    world.cycle()  # the first failed check starts the clock
    world.time.sleep(899)
    assert world.cycle().outcomes == ()
    world.time.sleep(2)

    report = world.cycle()

    (outcome,) = report.outcomes
    assert isinstance(outcome.action, Replace) and outcome.action.replaces.domain == domain
    assert outcome.result is ActionResult.SUCCEEDED
    world.cycle()  # the new VM passed its check: the old one goes
    assert vms_of(world, "web-2") == [outcome.action.domain]


def test_when_every_proxy_of_a_zone_fails_at_once_nothing_is_replaced(world: World) -> None:
    for _, domain in owned(world).values():
        world.prober.unhealthy.add(ip_of(world, domain))
    world.cycle()
    world.time.sleep(5000)

    report = world.cycle()

    assert report.outcomes == ()
    assert report.plan is not None and report.plan.suspect_zones == ("a",)
    assert "ProbePathSuspect" in conditions(report)
    held = [a for a in report.plan.actions if isinstance(a, Blocked)]
    assert len(held) == 3 and all("probe path is suspect" in a.reason for a in held)


def test_a_heal_whose_new_vm_gets_healthy_after_the_halt_deletes_the_old_vm(
    world: World,
) -> None:
    """Found on the lab under load: a failing proxy's replacement needed longer than the
    replace timeout, so the rollout halted; the new VM got healthy a minute later, but the
    old (failing) VM was held for ever, since the halt named the new VM as failing."""
    _, old = owned(world)["web-2"]
    served = {ip_of(world, d) for _, d in owned(world).values()} - {ip_of(world, old)}
    world.prober.healthy_only = served  # web-2's VM fails, and so does its replacement
    world.cycle()
    world.time.sleep(901)
    (outcome,) = world.cycle().outcomes  # the heal: a new VM, and the run returns
    assert isinstance(outcome.action, Replace) and outcome.result is ActionResult.SUCCEEDED
    new = outcome.action.domain
    world.time.sleep(601)  # past the replace timeout, its checks failing
    halted = world.cycle()
    assert [h.proxy for h in halted.halts] == ["web-2"] and halted.outcomes == ()
    assert new is not None and vms_of(world, "web-2") == sorted([old, new])

    world.prober.healthy_only = None  # the new VM has finished booting
    world.cycle()  # its first passing check
    report = world.cycle()

    assert [(o.action.kind.value, o.action.domain, o.result) for o in report.outcomes] == [
        ("delete", old, ActionResult.SUCCEEDED)
    ]
    assert vms_of(world, "web-2") == [new]


def test_a_held_zone_writes_the_same_status_on_every_run(world: World) -> None:
    """Found on the lab: the held replaces' reasons said for how many seconds the probe had
    failed, so every run's status differed and the daemon committed one status per run for
    as long as the probe path was down."""
    for _, domain in owned(world).values():
        world.prober.unhealthy.add(ip_of(world, domain))
    world.cycle()
    world.time.sleep(1000)
    first = statusdoc.build(world.cycle(), None, runs=[])
    world.time.sleep(300)
    second = statusdoc.build(world.cycle(), first, runs=[])

    assert first["blocked"] and "probe path is suspect" in str(first["blocked"])
    assert statusdoc.meaningful(second) == statusdoc.meaningful(first)


def test_a_rollout_to_a_broken_spec_halts_after_its_first_batch_and_a_revert_recovers(
    world: World, tmp_path: Path
) -> None:
    before = {p: vms_of(world, p) for p in ("web-1", "web-2", "web-3")}
    served = {ip_of(world, d[0]) for d in before.values()}
    world.prober.healthy_only = served  # every new VM is "broken"
    world.write("web-1", "web-2", "web-3", hostname_suffix="broken-")

    report = world.cycle("r2")

    results = [(o.action.proxy, o.result) for o in report.outcomes]
    assert results == [("web-1", ActionResult.SUCCEEDED)]  # batch 1 made; the run returns
    assert report.plan is not None
    waiting = [a for a in report.plan.actions if isinstance(a, Blocked)]
    assert {a.proxy for a in waiting if "batch 2" in a.reason or "batch 3" in a.reason} == {
        "web-2",
        "web-3",
    }
    world.time.sleep(601)  # the new VM never passes: its deadline passes
    report = world.cycle("r2")

    assert report.outcomes == ()
    assert "RolloutHalted" in conditions(report)
    halted_message = conditions(report)["RolloutHalted"]
    assert "rollout of r2 halted: web-1 failed its health check" in halted_message
    assert [h.proxy for h in report.halts] == ["web-1"]
    web1 = next(p for p in report.proxies if p.name == "web-1")
    assert web1.domain == before["web-1"][0] and web1.health.value == "healthy"
    assert "served by its old VM" in web1.detail
    for proxy in ("web-2", "web-3"):
        assert vms_of(world, proxy) == before[proxy]
    assert set(before["web-1"]) < set(vms_of(world, "web-1"))

    # A restarted daemon (a new engine, the same state dir) remembers the halt.
    world.engine = compose.engine(
        lambda host: world.hosts[host.name],
        images=world.engine.images,
        prober=world.prober,
        settings=world.engine.settings,
        runtime=world.engine.runtime,
        history=FileHistoryStore(tmp_path / "state" / "history.json"),
    )
    again = world.cycle("r2")
    assert again.outcomes == ()
    assert again.plan is not None
    halted = [a for a in again.plan.actions if isinstance(a, Blocked)]
    stopped = {a.proxy for a in halted if a.blocks.value == "replace" and "halted" in a.reason}
    assert stopped == {"web-2", "web-3"}
    assert "RolloutHalted" in conditions(again)

    world.write("web-1", "web-2", "web-3")  # the revert
    recovered = world.cycle("r3")

    assert "RolloutHalted" not in conditions(recovered)
    assert [(o.action.kind.value, o.result) for o in recovered.outcomes] == [
        ("delete", ActionResult.SUCCEEDED)
    ]
    assert {p: vms_of(world, p) for p in before} == before


def test_a_restarted_vm_is_starting_again_and_its_boot_is_not_a_failing_probe(
    world: World,
) -> None:
    domain = crash(world, "web-3")
    ip = ip_of(world, domain)
    world.prober.unhealthy.add(ip)  # booting: squid not up yet
    report = world.cycle()
    assert [type(o.action) for o in report.outcomes] == [Start]
    world.time.sleep(5000)  # far past replaceAfterSeconds, still not answering

    again = world.cycle()

    assert again.outcomes == ()  # not replaced: it never answered since its restart
    world.prober.unhealthy.discard(ip)
    world.cycle()  # healthy: from now on its probe is judged
    world.prober.unhealthy.add(ip)
    world.cycle()
    world.time.sleep(901)
    (outcome,) = world.cycle().outcomes
    assert isinstance(outcome.action, Replace) and outcome.action.replaces.domain == domain
