"""The second step of a replace: may the other VMs of a proxy go, now that it keeps a new one?

Pure. Nothing in a run waits for a guest to boot: a run creates the new VM and
returns, and a later plan reads from what was observed (the kept VM runs, it
was created at T) and what earlier runs saw (the history: it passed a health
check, or its checks fail) whether the handover is done:

- the kept VM passed a health check since it was made and does not fail now:
  the others go (``ready``);
- it runs and has not passed one yet: they wait, and follow-up runs probe it;
- it still has not, ``replace_timeout`` seconds after its creation (the
  deadline, like a Deployment's ``progressDeadlineSeconds``): the rollout of
  the revision halts on it, and the others stay, serving;
- a halt recorded for it holds until it passes a check (it may just have
  needed longer); the rollout stays halted until a new commit.

Without a history (``proxyfleet plan`` without state) the planner cannot know
health: the second step is shown as planned, and the executor looks at the
kept VM once before it deletes anything.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from reconciler.core.plan.vms import OwnedVm
from reconciler.model import DomainState
from reconciler.model.history import History
from reconciler.model.limits import Limits
from reconciler.model.plan import Halt


@dataclass(frozen=True, slots=True)
class Handover:
    """Whether the other VMs of a proxy may go; when not, ``why`` (a delete's reason)."""

    ready: bool
    why: str
    """Ready: what the kept VM is ("which is healthy"); else why the others wait."""
    halt: Halt | None = None
    """A halt this plan found: the kept VM passed no health check by its deadline."""


def handover(keeper: OwnedVm, *, proxy: str, history: History, limits: Limits) -> Handover:
    """Judge ``keeper``, the VM ``proxy`` keeps, for the delete of its other VMs."""
    where = f"{keeper.name} on {keeper.host}"
    if keeper.state is not DomainState.RUNNING:
        return Handover(False, f"waiting for the replacement {where} to run")
    record = history.record(keeper.host, keeper.name)
    waiting = f"waiting for {where} to pass its health check"
    if record.healthy_once and record.failing_since is None:
        return Handover(True, "which is healthy")
    if record.healthy_once:
        return Handover(False, waiting)  # failing again: the probe rules judge it
    if history.now is None:
        # No history: the executor looks at it once before the delete.
        return Handover(True, "which is running")
    halt = history.halt_of(proxy, keeper.name)
    if halt is not None:
        return Handover(False, f"{waiting}; rollout halted: {halt.reason}")
    age = _age(keeper, history.now, record.failing_since)
    deadline = limits.replace_timeout
    if age is None or deadline is None:
        return Handover(False, waiting)
    if age < deadline or record.failing_since is None:
        # Not judged before one check of this box failed: a box with an empty history
        # (a standby that took over) looks once before it halts anything.
        return Handover(False, f"{waiting} ({age:.0f} s of replaceTimeout {deadline:.0f} s)")
    reason = (
        f"new VM {keeper.name} passed no health check {age:.0f} s after its creation "
        f"(replaceTimeout {deadline:.0f} s)"
    )
    found = Halt(
        revision=history.revision, proxy=proxy, domain=keeper.name, reason=reason, since=history.now
    )
    return Handover(False, f"{waiting}; rollout halted: {reason}", halt=found)


def preference(vm: OwnedVm, history: History) -> tuple[bool, bool, bool, str, str]:
    """Which of several VMs of one proxy is kept (the least first): a running one, then
    one whose probe is not failing after it was healthy (a heal's booting successor beats
    the VM it heals), then one not still booting with failed checks, then by name, host."""
    record = history.record(vm.host, vm.name)
    failing = record.failing_since is not None
    return (
        vm.state is not DomainState.RUNNING,
        failing and record.healthy_once,
        failing and not record.healthy_once,
        vm.name,
        vm.host,
    )


def _age(keeper: OwnedVm, now: datetime, failing_since: datetime | None) -> float | None:
    """Seconds since ``keeper`` was created (its metadata), else since its first failed
    check; None when neither is known."""
    try:
        created: datetime | None = datetime.fromisoformat(keeper.owner.created)
    except ValueError:
        created = None
    if created is not None and created.tzinfo is None:
        created = created.replace(tzinfo=UTC)
    since = created or failing_since
    return None if since is None else max(0.0, (now - since).total_seconds())
