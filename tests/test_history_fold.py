"""What a run hands on to the next: restarts, health and halts folded into the history
(the rules one by one are case files: tests/history_cases/, run by test_history_cases)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

from reconciler.adapters.state.historystore import decode, encode
from reconciler.core.status.history import after_run, for_plan, with_since
from reconciler.model import Domain, DomainRef, DomainState, HostInventory, Inventory, Owner
from reconciler.model.history import Halt, History, VmRecord
from reconciler.model.plan import Start
from reconciler.model.report import ActionOutcome, ActionResult, Health, ProxyStatus

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
REF = DomainRef("kvm01", "pf-home-web-1-aaaaaaaa")


def world(state: DomainState, reason: str = "") -> Inventory:
    domain = Domain(REF.domain, state, Owner("home", "web-1", "d" * 64), reason=reason)
    return Inventory(hosts=(HostInventory("kvm01", True, domains=(domain,)),))


def started(inventory: Inventory, kept: History) -> VmRecord:
    start = Start(reason="", proxy="web-1", host=REF.host, domain=REF.domain)
    history = after_run(
        kept,
        inventory=inventory,
        halts=(),
        outcomes=(ActionOutcome(start, ActionResult.SUCCEEDED),),
        proxies=(),
        now=NOW,
    )
    return history.record(REF.host, REF.domain)


def test_a_start_of_a_crashed_vm_counts_as_a_restart_and_it_is_starting_again() -> None:
    kept = History(vms=((REF, VmRecord(healthy_once=True)),))

    record = started(world(DomainState.SHUTOFF, "crashed"), kept)

    assert record.restarts == (NOW,) and not record.healthy_once


def test_a_resume_after_an_io_pause_is_not_a_restart() -> None:
    kept = History(vms=((REF, VmRecord(healthy_once=True)),))

    record = started(world(DomainState.PAUSED, "ioerror"), kept)

    assert record == VmRecord(healthy_once=True)


def test_a_new_vm_running_without_an_address_yet_starts_its_failing_time() -> None:
    booting = ProxyStatus("web-1", REF.host, REF.domain, state="running", health=Health.UNKNOWN)

    history = after_run(
        History(),
        inventory=world(DomainState.RUNNING),
        halts=(),
        outcomes=(),
        proxies=(booting,),
        now=NOW,
    )

    assert history.record(REF.host, REF.domain) == VmRecord(failing_since=NOW)


def test_halts_are_kept_as_a_set_and_handed_to_plans_of_their_revision_only() -> None:
    halts = (
        Halt("r2", "web-1", "pf-home-web-1-bbbbbbbb", "no check passed", NOW),
        Halt("r2", "web-2", "pf-home-web-2-bbbbbbbb", "no check passed", NOW),
    )
    kept = after_run(
        History(),
        inventory=world(DomainState.RUNNING),
        halts=halts,
        outcomes=(),
        proxies=(),
        now=NOW,
    )

    assert for_plan(kept, now=NOW, revision="r2").halts == halts
    assert for_plan(kept, now=NOW, revision="r3").halts == ()


def test_a_history_file_with_the_single_halt_of_earlier_versions_reads_as_a_set_of_one() -> None:
    from reconciler.adapters.state.historystore import decode, encode

    halt = {"revision": "r2", "proxy": "web-1", "domain": "pf-x", "reason": "no IP"}
    document = {"version": 1, "vms": [], "halt": {**halt, "since": NOW.isoformat()}}

    history = decode(document)

    assert [(h.proxy, h.domain) for h in history.halts] == [("web-1", "pf-x")]
    assert decode(encode(history)) == history


def checked(health: Health, kept: History, *, at: datetime) -> History:
    proxy = ProxyStatus("web-1", REF.host, REF.domain, state="running", health=health)
    return after_run(
        kept, inventory=world(DomainState.RUNNING), halts=(), outcomes=(), proxies=(proxy,), now=at
    )


def test_healthy_since_is_the_first_passing_check_and_holds_until_a_failure() -> None:
    later = NOW.replace(hour=13)
    history = checked(Health.HEALTHY, checked(Health.HEALTHY, History(), at=NOW), at=later)
    assert history.record(REF.host, REF.domain).healthy_since == NOW
    proxy = ProxyStatus("web-1", REF.host, REF.domain, health=Health.HEALTHY)
    assert with_since((proxy,), history)[0].since == NOW
    failing = checked(Health.UNHEALTHY, history, at=later)
    assert failing.record(REF.host, REF.domain).healthy_since is None
    assert with_since((proxy,), failing)[0].since is None  # healthy now, by its record not
    failed = dataclasses.replace(proxy, health=Health.UNHEALTHY)
    assert with_since((failed,), failing)[0].since == later  # failing since
    healthy_again = checked(Health.HEALTHY, failing, at=later.replace(hour=14))
    assert healthy_again.record(REF.host, REF.domain).healthy_since == later.replace(hour=14)


def test_a_restart_ends_healthy_since_and_a_check_of_unknown_health_keeps_it() -> None:
    healthy = checked(Health.HEALTHY, History(), at=NOW)
    unknown = checked(Health.UNKNOWN, healthy, at=NOW.replace(hour=13))
    assert unknown.record(REF.host, REF.domain).healthy_since == NOW
    record = started(world(DomainState.SHUTOFF, "crashed"), unknown)
    assert record.healthy_since is None and record.restarts == (NOW,)


def test_healthy_since_is_kept_in_the_history_file() -> None:
    history = checked(Health.HEALTHY, History(), at=NOW)
    assert decode(encode(history)).record(REF.host, REF.domain).healthy_since == NOW


def test_a_failing_check_in_a_suspect_zone_marks_the_vm_and_a_pass_clears_it() -> None:
    proxy = ProxyStatus(
        "web-1", REF.host, REF.domain, state="running", health=Health.UNHEALTHY, zone="a"
    )
    running = world(DomainState.RUNNING)

    def run(kept: History, at: datetime, suspect: tuple[str, ...], health: Health) -> History:
        checked = dataclasses.replace(proxy, health=health)
        return after_run(
            kept,
            inventory=running,
            halts=(),
            outcomes=(),
            proxies=(checked,),
            now=at,
            suspect_zones=suspect,
        )

    healthy = run(History(), NOW, (), Health.HEALTHY)
    held = run(healthy, NOW.replace(hour=13), ("a",), Health.UNHEALTHY)
    later = run(held, NOW.replace(hour=14), (), Health.UNHEALTHY)
    record = later.record(REF.host, REF.domain)
    assert record.suspect_at == NOW.replace(hour=13)
    assert record.failing_since == NOW.replace(hour=13)
    assert decode(encode(later)).record(REF.host, REF.domain).suspect_at == NOW.replace(hour=13)
    elsewhere = run(healthy, NOW.replace(hour=13), ("b",), Health.UNHEALTHY)
    assert elsewhere.record(REF.host, REF.domain).suspect_at is None
    passed = run(later, NOW.replace(hour=15), (), Health.HEALTHY)
    assert passed.record(REF.host, REF.domain).suspect_at is None
