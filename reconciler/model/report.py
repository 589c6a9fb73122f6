"""What one reconcile run found and did: produced by the engine, consumed by the
status writer, the metrics exporter and the CLI.

Times are timezone-aware UTC datetimes supplied by an injected clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from reconciler.model.fleet import HostState
from reconciler.model.inventory import DomainState
from reconciler.model.plan import Action, Halt, Plan


class RunResult(StrEnum):
    SUCCESS = "success"
    """Everything planned was applied (blocked actions may remain)."""
    PARTIAL = "partial"
    """Some actions failed; the rest were applied."""
    STALLED = "stalled"
    """Nothing was attempted: the source or the manifests are unusable."""
    FAILED = "failed"
    """The run itself broke (a bug or an unexpected error); nothing is assumed."""


class ActionResult(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    """Not started: shutdown requested, or a prerequisite failed."""


class ProxyState(StrEnum):
    """What a proxy's VM is after a run: a ``DomainState`` of the VM that speaks for it, or
    why there is none to speak of. The values are those of status.yaml and the metrics."""

    RUNNING = "running"
    SHUTOFF = "shutoff"
    PAUSED = "paused"
    CRASHED = "crashed"
    OTHER = "other"
    ABSENT = "absent"
    """No VM: none planned, or its create did not run."""
    UNKNOWN = "unknown"
    """Its VM may sit on a host that did not answer."""
    FAILED = "failed"
    """Its create failed."""

    @classmethod
    def of(cls, state: DomainState) -> ProxyState:
        """The proxy state of a VM the hypervisor reports in ``state``."""
        return cls(state.value)


class Health(StrEnum):
    HEALTHY = "healthy"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    """Ready, Reconciling or Stalled."""
    status: bool
    reason: str
    message: str = ""


@dataclass(frozen=True, slots=True)
class ActionOutcome:
    action: Action
    result: ActionResult
    error: str = ""
    attempts: int = 1
    duration_seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class ProxyStatus:
    name: str
    host: str = ""
    domain: str = ""
    state: ProxyState = ProxyState.ABSENT
    ip: str = ""
    health: Health = Health.UNKNOWN
    detail: str = ""
    """Why unhealthy / failed, in one sentence."""
    zone: str = ""
    since: datetime | None = None
    """Since when its VM has been healthy (or failing) without a break, from the history the
    engine keeps (``history.json``); None: not recorded (the status counts from when it first
    showed this state)."""

    def __post_init__(self) -> None:
        # The serialized value is accepted too: a status read back, a test's literal.
        object.__setattr__(self, "state", ProxyState(self.state))


@dataclass(frozen=True, slots=True)
class HostStatus:
    name: str
    reachable: bool
    error: str = ""
    zone: str = ""
    owned: int = 0
    """This fleet's VMs on the host as observed: on a draining host, those left to move."""
    foreign: int = 0
    state: HostState = HostState.ACTIVE
    """``spec.hosts[].state``: a cordoned or draining host takes no new VM."""


@dataclass(frozen=True, slots=True)
class Member:
    """A proxy of the repo as its clients see it after a run: the VM that speaks for it and
    its health. The DNS names and the Prometheus targets are made of these
    (reconciler.core.endpoints)."""

    proxy: str
    zone: str = ""
    proxy_set: str = ""
    """The ProxySet it belongs to; "" for a Proxy document."""
    address: str = ""
    """The address its health check answered on (canonical text); "" when none is known."""
    health: Health = Health.UNKNOWN
    host: str = ""
    port: int = 3128
    """The port clients use (``spec.health.proxyPort``)."""


class DnsResult(StrEnum):
    PUBLISHED = "published"
    """The server took this run's changes."""
    UNCHANGED = "unchanged"
    """The server already had every wanted record: nothing was sent."""
    FAILED = "failed"
    """The server was unreachable or refused the transfer or the update: nothing changed."""


@dataclass(frozen=True, slots=True)
class DnsOutcome:
    """What publishing the fleet's names did this run (reconciler.engine.endpoints)."""

    result: DnsResult
    records: int = 0
    """Names the fleet owns on the server after the run."""
    changes: int = 0
    """Names this run created, changed or deleted."""
    conflicts: tuple[str, ...] = ()
    """Wanted names held by someone else (no TXT of this fleet), one sentence each: left alone."""
    reason: str = ""
    """Why it failed, as the DnsPublished condition's reason: ServerUnreachable,
    ServerRefused (the server said no: ``rcode``) or KeyUnusable (the box's key)."""
    rcode: str = ""
    """The server's answer when it refused (``NOTAUTH``, ``REFUSED``, ``NXRRSET``, ``BADSIG``)."""
    error: str = ""
    """Why it failed, in one sentence (never the key's secret)."""


@dataclass(frozen=True, slots=True)
class RunReport:
    started: datetime
    finished: datetime
    result: RunResult
    revision: str = ""
    """The commit this run reconciled ("" when the source failed before one was known)."""
    problems: tuple[str, ...] = ()
    """Validation / source errors, one line each (file:line:col: field: message)."""
    plan: Plan | None = None
    outcomes: tuple[ActionOutcome, ...] = ()
    proxies: tuple[ProxyStatus, ...] = ()
    hosts: tuple[HostStatus, ...] = ()
    conditions: tuple[Condition, ...] = ()
    suspended: bool = False
    halts: tuple[Halt, ...] = ()
    """The failed replaces that halt the rollout of this revision after the run (none: not
    halted), one per proxy."""
    refused: str = ""
    """A head the source refused (not a fast-forward, or ``verifyCommits``) or a guard did
    (a host removed while it holds VMs): the run reconciled ``revision``, the last accepted
    one, and nothing acted on this one."""
    settling: tuple[str, ...] = ()
    """Proxies whose VM is new and not healthy yet (made or started by this run, or created
    less than ``replace_timeout`` ago), and those of ``handover``: the daemon looks again soon
    instead of an interval later."""
    handover: tuple[str, ...] = ()
    """Proxies whose new VM passed its first check in this run while an old VM of theirs
    still exists: the next plan deletes the old VM and starts the zone's next replace, so
    the next run comes at once (engine/daemon.HANDOVER), not a follow-up period later."""
    dns: DnsOutcome | None = None
    """What publishing the proxies' names did; None: no ``dns`` configured (or not reached)."""
    fleet: str = ""
    """The fleet's id (``metadata.name``) once the repo loaded."""
    members: tuple[Member, ...] = ()
    """The repo's proxies as clients see them after the run (the DNS names and the
    Prometheus targets are made of them); empty when nothing was observed."""

    @property
    def duration_seconds(self) -> float:
        return (self.finished - self.started).total_seconds()
