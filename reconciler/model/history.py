"""What earlier runs saw: the planner's third input, for the rules that need time.

A crash loop, a probe that keeps failing and a halted rollout are facts about
the past that the hosts do not keep. The engine records them after each run
(``reconciler.adapters.state.historystore``, a JSON file in the state dir) and hands
them back to the next plan together with the time of planning, so that the
planner stays a pure function.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from reconciler.model.plan import DomainRef, Halt

__all__ = ["Halt", "History", "VmRecord"]


@dataclass(frozen=True, slots=True)
class VmRecord:
    """One VM's recent past."""

    failing_since: datetime | None = None
    """When its probe started failing without a break (None: not failing now)."""
    healthy_once: bool = False
    """It passed a health check since it was made or last started: until it does it is
    still starting (booting), and only a rollout's health gate judges it."""
    restarts: tuple[datetime, ...] = ()
    """When proxyfleet started it again (drift: correct), oldest first."""
    healthy_since: datetime | None = None
    """When its probe started passing without a break (None: not passing now, or not
    checked since it was made or started): "healthy since" in get, info and STATUS.md."""
    suspect_at: datetime | None = None
    """The last run that found it failing while its zone's probe path was suspect (None:
    none since it last passed). Its replaceAfterSeconds count from then: a proxy that still
    fails once the probe path is back is given that long, not replaced on the spot for a
    failure the probe path may have caused."""

    def restarts_since(self, since: datetime) -> int:
        return sum(1 for when in self.restarts if when >= since)


_NO_RECORD = VmRecord()


@dataclass(frozen=True, slots=True)
class History:
    """``now`` is when the plan is made and ``revision`` what it plans; ``halts`` are given
    only for that revision (a new commit resumes a halted rollout)."""

    now: datetime | None = None
    vms: tuple[tuple[DomainRef, VmRecord], ...] = ()
    halts: tuple[Halt, ...] = ()
    revision: str = ""
    _index: dict[tuple[str, str], VmRecord] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """(host, domain) -> record: a plain tuple, since a plan asks about every VM it keeps
    (twice) and a frozen DomainRef per question cost ~1 us of a 2,000-VM plan's ~40 us each."""

    def __post_init__(self) -> None:
        self._index.update(((ref.host, ref.domain), record) for ref, record in self.vms)

    def halt_of(self, proxy: str, domain: str) -> Halt | None:
        """The halt recorded for ``proxy``'s new VM ``domain``; None when there is none."""
        return next((h for h in self.halts if (h.proxy, h.domain) == (proxy, domain)), None)

    def record(self, host: str, domain: str) -> VmRecord:
        return self._index.get((host, domain), _NO_RECORD)

    def failing_count(self) -> int:
        """VMs whose probe fails now, once they were healthy: those ``failing_for`` times."""
        if self.now is None:
            return 0
        return sum(1 for _, r in self.vms if r.failing_since is not None and r.healthy_once)

    def failing_for(self, host: str, domain: str) -> float | None:
        """Seconds the VM's probe has failed without a break, once it was healthy; else None."""
        record = self.record(host, domain)
        if self.now is None or record.failing_since is None or not record.healthy_once:
            return None
        return max(0.0, (self.now - record.failing_since).total_seconds())
