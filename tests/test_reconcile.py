"""One reconcile cycle end to end: a repo on disk, fake hosts, fake time."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from enginefakes import FleetRepo as Fleet

from reconciler.adapters.hypervisor.fakehost import Call, FakeHypervisor
from reconciler.engine.pool import HostPool
from reconciler.errors import PermanentError, TransientError
from reconciler.model import ActionKind, Host
from reconciler.model.report import ActionResult, Health, RunReport, RunResult
from reconciler.model.settings import ApplySettings


@pytest.fixture
def fleet(tmp_path: Path) -> Fleet:
    return Fleet(tmp_path)


def condition(report: RunReport, kind: str) -> tuple[bool, str]:
    (found,) = [c for c in report.conditions if c.type == kind]
    return found.status, found.reason


def test_a_first_cycle_creates_every_proxy_and_reports_it_healthy(fleet: Fleet) -> None:
    report = fleet.cycle()

    assert report.result is RunResult.SUCCESS
    assert report.revision == "rev1"
    assert [o.action.kind for o in report.outcomes] == [ActionKind.CREATE] * 3
    assert {o.result for o in report.outcomes} == {ActionResult.SUCCEEDED}
    assert [(p.name, p.state, p.health) for p in report.proxies] == [
        ("web-1", "running", Health.HEALTHY),
        ("web-2", "running", Health.HEALTHY),
        ("web-3", "running", Health.HEALTHY),
    ]
    assert all(p.ip.startswith("192.0.2.") and p.zone == "a" for p in report.proxies)
    assert condition(report, "Ready") == (True, "Reconciled")
    assert condition(report, "Reconciling") == (False, "Converged")
    assert condition(report, "Stalled") == (False, "Valid")
    assert [(h.name, h.reachable, h.owned) for h in report.hosts] == [
        ("kvm01", True, 2),  # after the run: the VMs it made count
        ("kvm02", True, 1),
    ]


def test_a_second_cycle_over_an_unchanged_world_makes_no_mutating_call(fleet: Fleet) -> None:
    fleet.cycle()
    fleet.forget_calls()

    report = fleet.cycle()

    assert fleet.mutating_calls() == []
    assert report.outcomes == ()
    assert report.result is RunResult.SUCCESS
    assert condition(report, "Reconciling") == (False, "NoChanges")
    assert [p.health for p in report.proxies] == [Health.HEALTHY] * 3
    assert [h.owned for h in report.hosts] == [2, 1]


def test_broken_manifests_stall_the_cycle_and_no_host_is_contacted(fleet: Fleet) -> None:
    fleet.write(("kvm01",), ("web-1",), extra="---\nkind: Proxy\nmetadata: {name: Bad_Name}\n")

    report = fleet.cycle()

    assert report.result is RunResult.STALLED
    assert report.problems
    assert all(p.startswith("proxies.yaml:") for p in report.problems)
    assert report.plan is None
    assert fleet.made == []
    assert all(host.calls == [] for host in fleet.hosts.values())
    assert condition(report, "Stalled") == (True, "ValidationFailed")
    assert condition(report, "Ready") == (False, "ValidationFailed")


def test_an_unreachable_host_has_nothing_deleted(fleet: Fleet) -> None:
    fleet.cycle()
    host, domain = fleet.where("web-2")
    refused = TransientError("connection refused", host=host)
    fleet.hosts[host].fail("observe", refused, times=None)
    fleet.write(("kvm01", "kvm02"), ("web-1", "web-3"))  # web-2's manifest is gone
    fleet.forget_calls()

    report = fleet.cycle()

    assert fleet.mutating_calls() == []
    assert domain in fleet.hosts[host].domains
    unreachable = next(h for h in report.hosts if h.name == host)
    assert (unreachable.reachable, unreachable.error) == (False, f"host {host}: connection refused")
    assert condition(report, "Ready") == (False, "HostsUnreachable")


def test_a_proxy_whose_host_is_unreachable_is_unknown_and_not_created_again(fleet: Fleet) -> None:
    fleet.cycle()
    host, _ = fleet.where("web-2")
    refused = TransientError("connection refused", host=host)
    fleet.hosts[host].fail("observe", refused, times=None)
    fleet.forget_calls()

    report = fleet.cycle()

    assert fleet.mutating_calls() == []
    web2 = next(p for p in report.proxies if p.name == "web-2")
    assert (web2.state, web2.health) == ("unknown", Health.UNKNOWN)
    assert "unreachable" in web2.detail
    assert condition(report, "Ready") == (False, "ActionsBlocked")


def test_a_host_that_hangs_past_the_observe_deadline_counts_as_unreachable(fleet: Fleet) -> None:
    fleet.cycle()
    release = threading.Event()
    fleet.hosts["kvm02"].on_call = lambda call: (
        release.wait(10) if call.method == "observe" else None
    )
    try:
        report = fleet.cycle()
    finally:
        release.set()

    hung = next(h for h in report.hosts if h.name == "kvm02")
    assert (hung.reachable, hung.error) == (False, "no answer within 2 s")
    assert fleet.mutating_calls() == [
        c for c in fleet.mutating_calls() if c[1] in ("ensure_image", "create")
    ]
    assert report.result is RunResult.SUCCESS


def test_a_changed_spec_replaces_each_vm_new_one_first_and_the_next_cycle_is_quiet(
    fleet: Fleet,
) -> None:
    fleet.cycle()
    old = {p: fleet.where(p) for p in ("web-1", "web-2", "web-3")}
    fleet.write(("kvm01", "kvm02"), ("web-1", "web-2", "web-3"), extra="")
    text = (fleet.root / "proxies.yaml").read_text().replace("hostname: web-1", "hostname: w1")
    (fleet.root / "proxies.yaml").write_text(text)
    fleet.forget_calls()

    report = fleet.cycle("rev2")

    host, new_domain = next(
        (h, d.name)
        for h, hv in fleet.hosts.items()
        for d in hv.domains.values()
        if d.owner is not None and d.owner.proxy == "web-1" and d.owner.revision == "rev2"
    )
    assert host == old["web-1"][0]
    assert new_domain != old["web-1"][1]
    assert old["web-1"][1] in fleet.hosts[host].domains  # the run does not wait for the new one
    calls = [c for c in fleet.hosts[host].calls if c.method in ("create", "delete")]
    assert calls == [Call("create", new_domain)]
    assert [o.action.kind for o in report.outcomes] == [ActionKind.REPLACE]
    assert report.result is RunResult.SUCCESS
    assert fleet.hosts[host].domains[new_domain].owner.revision == "rev2"  # type: ignore[union-attr]

    fleet.forget_calls()
    fleet.cycle("rev2")  # the new VM passed its check in the run before: the old one goes
    deletes = [c for c in fleet.hosts[host].calls if c.method == "delete"]
    assert deletes == [Call("delete", old["web-1"][1])]
    assert old["web-1"][1] not in fleet.hosts[host].domains

    fleet.forget_calls()
    fleet.cycle("rev2")
    assert fleet.mutating_calls() == []


def test_a_failed_create_makes_a_partial_report_and_the_next_cycle_retries_it(
    fleet: Fleet,
) -> None:
    for host in fleet.hosts.values():
        host.fail("create", PermanentError("pool is full"))

    report = fleet.cycle()

    assert report.result is RunResult.PARTIAL
    failed = [o for o in report.outcomes if o.result is ActionResult.FAILED]
    assert len(failed) == 2
    assert condition(report, "Ready") == (False, "ActionsFailed")
    assert condition(report, "Reconciling") == (True, "RetryPending")
    assert sorted(p.state for p in report.proxies) == ["failed", "failed", "running"]

    again = fleet.cycle()
    assert again.result is RunResult.SUCCESS
    assert [o.action.kind for o in again.outcomes] == [ActionKind.CREATE] * 2


def test_an_unhealthy_proxy_keeps_ready_false(fleet: Fleet) -> None:
    fleet.cycle()
    fleet.engine.prober.unhealthy.add(fleet.hosts["kvm01"].addresses_of[fleet.where("web-1")[1]][0])  # type: ignore[attr-defined]

    report = fleet.cycle()

    web1 = next(p for p in report.proxies if p.name == "web-1")
    assert web1.health is Health.UNHEALTHY
    assert "HTTP 503" in web1.detail
    assert condition(report, "Ready") == (False, "ProxiesUnhealthy")


def test_an_unexpected_error_becomes_a_failed_report_not_an_exception(fleet: Fleet) -> None:
    def broken(host: Host) -> FakeHypervisor:
        raise RuntimeError("factory bug")

    fleet.engine.pool = HostPool(broken)

    report = fleet.cycle()

    assert report.result is RunResult.FAILED
    assert report.problems == ("RuntimeError: factory bug",)
    assert condition(report, "Ready") == (False, "RunFailed")


def test_the_pool_keeps_connections_across_cycles_and_closes_those_of_removed_hosts(
    fleet: Fleet,
) -> None:
    fleet.write(("kvm01", "kvm02"), ())
    fleet.cycle()
    fleet.cycle()
    assert fleet.made == ["kvm01", "kvm02"]

    fleet.write(("kvm01",), ())
    fleet.cycle()

    assert fleet.hosts["kvm02"].closed
    assert not fleet.hosts["kvm01"].closed
    assert fleet.made == ["kvm01", "kvm02"]


def test_a_replacement_that_never_gets_healthy_leaves_the_old_vm_serving(fleet: Fleet) -> None:
    fleet.engine.settings = ApplySettings(
        replace_timeout=60, observe_timeout=2.0, ip_wait_timeout=0.0
    )
    fleet.cycle()
    host, old = fleet.where("web-1")
    text = (fleet.root / "proxies.yaml").read_text().replace("hostname: web-1", "hostname: w1")
    (fleet.root / "proxies.yaml").write_text(text)
    fleet.hosts[host].auto_ip = False

    report = fleet.cycle("rev2")

    (outcome,) = report.outcomes
    assert outcome.result is ActionResult.SUCCEEDED  # created; nothing waited for its boot
    web1 = next(p for p in report.proxies if p.name == "web-1")
    assert (web1.domain, web1.state, web1.health) == (old, "running", Health.HEALTHY)
    assert "served by its old VM; new VM" in web1.detail and "no IP address yet" in web1.detail
    assert "web-1" in report.settling

    fleet.time.sleep(61)
    for _ in range(2):  # past the deadline, once a check of its own failed: halted
        report = fleet.cycle("rev2")

    assert old in fleet.hosts[host].domains
    assert [h.proxy for h in report.halts] == ["web-1"]
    assert condition(report, "RolloutHalted")[1] == "NewVmUnhealthy"
    web1 = next(p for p in report.proxies if p.name == "web-1")
    assert (web1.domain, web1.health) == (old, Health.HEALTHY)
    assert condition(report, "Reconciling") == (False, "RolloutHalted")


def test_the_check_waits_for_the_ip_of_a_vm_created_in_this_run(fleet: Fleet) -> None:
    fleet.write(("kvm01",), ("web-1",))
    host = fleet.hosts["kvm01"]
    host.auto_ip = False
    looks: list[str] = []

    def late_ip(call: Call) -> None:
        if call.method == "addresses":
            looks.append(call.target)
            if len(looks) == 4:
                host.addresses_of[call.target] = ("192.0.2.99",)

    host.on_call = late_ip

    report = fleet.cycle()

    (web1,) = report.proxies
    assert (web1.ip, web1.health) == ("192.0.2.99", Health.HEALTHY)
    assert len(looks) == 4
    assert fleet.time.elapsed == pytest.approx(15.0)


def test_a_vm_without_an_ip_after_the_wait_is_reported_without_one(fleet: Fleet) -> None:
    fleet.engine.settings = ApplySettings(ip_wait_timeout=20, observe_timeout=2.0)
    fleet.write(("kvm01",), ("web-1",))
    fleet.hosts["kvm01"].auto_ip = False

    report = fleet.cycle()

    (web1,) = report.proxies
    assert (web1.state, web1.ip, web1.health) == ("running", "", Health.UNKNOWN)
    assert "no IP address yet" in web1.detail
    assert fleet.time.elapsed <= 20


def test_a_stop_request_during_a_cycle_skips_the_rest_and_probes_nothing(fleet: Fleet) -> None:
    fleet.engine.settings = ApplySettings(per_host_concurrency=1, observe_timeout=2.0)
    fleet.hosts["kvm01"].on_call = lambda call: (
        fleet.stop.set() if call.method == "create" else None
    )

    report = fleet.cycle()

    results = sorted(o.result.value for o in report.outcomes)
    assert results.count("skipped") >= 1
    assert fleet.engine.prober.calls == []  # type: ignore[attr-defined]
    assert all("not checked: shutdown requested" in p.detail for p in report.proxies)
    assert report.result is RunResult.PARTIAL
    assert condition(report, "Ready")[1] == "Interrupted"
