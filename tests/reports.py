"""RunReport builders for tests of the status writer, the metrics and the daemon."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reconciler.model import fleet
from reconciler.model.fleet import CloudInit, Host, HostNetwork, Image, MachineType
from reconciler.model.plan import ActionKind, Blocked, Create, Keep, NewVm, Plan
from reconciler.model.report import (
    ActionOutcome,
    ActionResult,
    Condition,
    Health,
    HostStatus,
    ProxyStatus,
    RunReport,
    RunResult,
)

NEW_VM = NewVm(
    fleet="f",
    proxy="web-1",
    host=Host("kvm-a", "kvm-a.example.test", "a", HostNetwork("bridge", "br0")),
    image=Image("debian-12", "https://images.example.test/debian-12.qcow2"),
    machine_type=MachineType("small", 1, 512, 4),
    cloud_init=CloudInit(),
    install_guest_agent=True,
    protect=False,
    health=fleet.HealthCheck(),
)
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
REV1 = "1" * 40
REV2 = "2" * 40


def ready(ok: bool = True) -> tuple[Condition, ...]:
    return (
        Condition("Ready", ok, "Reconciled" if ok else "ActionsFailed"),
        Condition("Reconciling", False, "Idle"),
        Condition("Stalled", False, "SourceValid"),
    )


def report(
    *,
    minute: int = 0,
    revision: str = REV1,
    result: RunResult = RunResult.SUCCESS,
    state: str = "running",
    health: Health = Health.HEALTHY,
    ip: str = "10.0.0.5",
    created: bool = False,
    blocked: bool = False,
    reachable: bool = True,
    problems: tuple[str, ...] = (),
) -> RunReport:
    started = T0 + timedelta(minutes=minute)
    actions = [
        Keep(reason="new", proxy="web-1", host="kvm-a")
        if not created
        else Create(reason="new", proxy="web-1", host="kvm-a", vm=NEW_VM)
    ]
    if blocked:
        actions.append(
            Blocked(
                reason="deletes beyond maxDeletesPerRun (1)",
                proxy="old-1",
                host="kvm-b",
                domain="pf-f-old-1-abcdef12",
                blocks=ActionKind.DELETE,
            )
        )
    outcomes = (
        (ActionOutcome(actions[0], ActionResult.SUCCEEDED, duration_seconds=3.0),)
        if created
        else ()
    )
    return RunReport(
        started=started,
        finished=started + timedelta(seconds=4),
        result=result,
        revision=revision,
        problems=problems,
        plan=Plan(tuple(actions)),
        outcomes=outcomes,
        proxies=(
            ProxyStatus(
                "web-1",
                host="kvm-a",
                domain="pf-f-web-1-0123abcd",
                state=state,
                ip=ip,
                health=health,
                zone="east",
            ),
        ),
        hosts=(
            HostStatus("kvm-a", True, zone="east", owned=1),
            HostStatus("kvm-b", reachable, zone="west", error="" if reachable else "ssh: refused"),
        ),
        conditions=ready(result == RunResult.SUCCESS),
    )
