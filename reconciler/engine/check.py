"""Step 6 of a cycle: is each proxy there, does it have an IP, does it proxy?

For a VM: its IPv4 addresses as the host adapter finds them (guest agent
first, ARP / DHCP leases after: the adapter owns that order), then a request
through the proxy at each address until one answers as the manifest's
``health`` expects. A VM created in this run may need a while for an IP, so
the check can wait, bounded, polling at ``poll_interval``.

The replace step of the executor uses the same check to decide that a new VM
is good enough for the old one to go.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from typing import Protocol

from reconciler.adapters.hypervisor.host import Hypervisor
from reconciler.core.plan.keep import UP_TO_DATE
from reconciler.engine.runtime import Runtime
from reconciler.errors import HostError, NotFoundError, TransientError
from reconciler.logfields import carry
from reconciler.model import Action, ActionKind, DomainState, Inventory, Plan, Proxy, Repo, fleet
from reconciler.model.plan import replaced
from reconciler.model.report import ActionOutcome, ActionResult, Health, ProxyStatus
from reconciler.model.settings import ApplySettings
from reconciler.progress import ProgressEvent
from reconciler.progress import emit as emit_progress

log = logging.getLogger(__name__)


class ProbeOutcome(Protocol):
    """What a probe says: healthy or not, and why in one sentence."""

    @property
    def healthy(self) -> bool: ...

    @property
    def detail(self) -> str: ...


class Prober(Protocol):
    """Sends one request through the proxy at ``ip`` as ``health`` describes: the one
    probing seam (``HttpProber`` and ``FakeProber`` in reconciler.adapters.surface.probe)."""

    def probe(self, ip: str, health: fleet.HealthCheck) -> ProbeOutcome:
        """Never raises for network failures. Cost: one TCP connection, at most
        ``health.timeout_seconds`` in all."""
        ...


@dataclass(frozen=True, slots=True)
class VmHealth:
    """The check of one VM: ``found`` is False when the domain is gone."""

    ip: str = ""
    health: Health = Health.UNKNOWN
    detail: str = ""
    found: bool = True


def check_vm(
    host: Hypervisor,
    domain: str,
    health: fleet.HealthCheck,
    prober: Prober,
    *,
    wait: float,
    settings: ApplySettings,
    runtime: Runtime,
) -> VmHealth:
    """Look up ``domain``'s addresses and probe them; keep trying for ``wait`` seconds.

    ``wait`` 0 means one look. Waiting ends early when the VM is healthy, when
    the domain is gone, on a permanent host error, or on a stop request.
    Never raises a HostError.
    """
    deadline = runtime.monotonic() + wait
    while True:
        result, settled = _look_once(host, domain, health, prober)
        if settled or runtime.stop.is_set():
            return result
        if runtime.monotonic() + settings.poll_interval > deadline:
            return result
        runtime.sleep(settings.poll_interval)


def _look_once(
    host: Hypervisor, domain: str, health: fleet.HealthCheck, prober: Prober
) -> tuple[VmHealth, bool]:
    """One look; the flag says whether waiting longer could change the answer."""
    try:
        addresses = host.addresses(domain)
    except NotFoundError:
        return VmHealth(detail=f"domain {domain} not found on host {host.name}", found=False), True
    except TransientError as exc:
        # Said in the log too: a wait that only keeps the last detail would hide what the
        # host answered meanwhile (libvirtd restarting, a link that dropped).
        log.debug(
            "Reading the addresses of %s on %s failed, looking again: %s", domain, host.name, exc
        )
        return VmHealth(detail=f"could not read its addresses: {exc}"), False
    except HostError as exc:
        return VmHealth(detail=f"could not read its addresses: {exc}"), True
    if not addresses:
        return VmHealth(detail="no IP address yet (guest agent and ARP/leases know none)"), False
    details = []
    for ip in addresses:
        outcome = prober.probe(ip, health)
        if outcome.healthy:
            return VmHealth(ip=ip, health=Health.HEALTHY, detail=outcome.detail), True
        details.append(f"{ip}: {outcome.detail}")
    log.debug("Proxy VM %s on %s failed its health check: %s", domain, host.name, details)
    return VmHealth(ip=addresses[0], health=Health.UNHEALTHY, detail="; ".join(details)), False


@dataclass(frozen=True, slots=True)
class _Target:
    """Which VM speaks for a proxy after the apply step, and what is known of it."""

    status: ProxyStatus
    fresh: bool = False
    """Created or started in this run: its IP may take a while."""


def check_proxies(
    repo: Repo,
    plan: Plan,
    inventory: Inventory,
    outcomes: Sequence[ActionOutcome],
    hosts: Mapping[str, Hypervisor],
    prober: Prober,
    *,
    settings: ApplySettings,
    runtime: Runtime,
) -> tuple[ProxyStatus, ...]:
    """One ProxyStatus per proxy of the repo and per owned VM the plan still lists.

    The VM that speaks for a proxy is the one the plan keeps, created, started
    or (when a replace failed) left in place; running ones on reachable hosts
    get an IP lookup and a probe, in parallel, VMs of this run waiting up to
    ``ip_wait_timeout`` for their IP.
    """
    results = {o.action: o for o in outcomes}
    targets = _targets(repo, plan, inventory, results)
    if runtime.stop.is_set():  # shutting down: report what is known, probe nothing
        return tuple(_unchecked(t.status) for t in targets)
    waits = any(t.fresh for t in targets) and settings.ip_wait_timeout > 0
    with ThreadPoolExecutor(max(1, settings.check_concurrency), "check") as pool:
        futures = [
            pool.submit(carry(_check_target), repo, t, hosts, prober, settings, runtime)
            for t in targets
        ]
        if waits:
            _watch(futures)
        return tuple(f.result() for f in futures)


def _watch(futures: Sequence[Future[ProxyStatus]]) -> None:
    """Report each proxy's check as it settles (a wait for new VMs can take minutes)."""
    total = len(futures)
    healthy = 0

    def event(done: int, note: str) -> ProgressEvent:
        return ProgressEvent(
            task="health",
            description="health checks",
            done=done,
            total=total,
            unit="proxies",
            finished=done == total,
            note=note,
        )

    emit_progress(event(0, ""), "Waiting for %d proxies to pass their health check.", total)
    for done, future in enumerate(as_completed(futures), start=1):
        status = future.result()
        healthy += status.health is Health.HEALTHY
        note = f"{status.name} {status.health.value}"
        emit_progress(
            event(done, note),
            "Health check %d of %d settled: %s (%d healthy so far).",
            done,
            total,
            note,
            healthy,
        )


def _targets(
    repo: Repo,
    plan: Plan,
    inventory: Inventory,
    results: Mapping[Action, ActionOutcome],
) -> list[_Target]:
    by_proxy: dict[str, list[Action]] = {}
    for action in plan.actions:
        if action.proxy:
            by_proxy.setdefault(action.proxy, []).append(action)
    targets = []
    for name in sorted({p.name for p in repo.proxies} | set(by_proxy)):
        proxy = repo.proxy(name)
        zone = proxy.placement.zone if proxy is not None else ""
        actions = by_proxy.get(name, [])
        target = _target_of(name, actions, inventory, results, present=proxy is not None)
        if target is None:
            continue
        if (
            proxy is not None
            and target.status.state == "absent"
            and _may_hide(proxy, repo, inventory)
        ):
            # Not seen is not absent: its VM may run on the host that did not answer.
            unknown = replace(target.status, state="unknown", health=Health.UNKNOWN)
            target = _Target(unknown)
        if not target.status.zone:
            host = repo.fleet.host(target.status.host)
            zone = zone or (host.zone if host is not None else "")
            target = _Target(replace(target.status, zone=zone), target.fresh)
        targets.append(target)
    return targets


def _unchecked(status: ProxyStatus) -> ProxyStatus:
    note = "not checked: shutdown requested"
    return replace(status, detail="; ".join(d for d in (status.detail, note) if d))


def _may_hide(proxy: Proxy, repo: Repo, inventory: Inventory) -> bool:
    """True when a host that could hold ``proxy``'s VM (its zone's, its pin) was not read."""
    pin = proxy.placement.host
    for host in repo.fleet.hosts:
        if host.zone == proxy.placement.zone or host.name == pin:
            seen = inventory.host(host.name)
            if seen is None or not seen.reachable:
                return True
    return False


def _target_of(
    name: str,
    actions: Sequence[Action],
    inventory: Inventory,
    results: Mapping[Action, ActionOutcome],
    *,
    present: bool,
) -> _Target | None:
    if not actions:
        return _Target(ProxyStatus(name, state="absent", detail="not in the plan"))
    # The planner lists a proxy's kept VM first; for a manifest that is gone,
    # any VM that is not deleted by now still speaks for it.
    for action in actions:
        outcome = results.get(action)
        if action.kind is ActionKind.DELETE and (
            outcome is None or outcome.result is ActionResult.SUCCEEDED
        ):
            continue
        return _after(name, action, outcome, inventory)
    return _Target(ProxyStatus(name, state="absent")) if present else None


def _after(
    name: str, action: Action, outcome: ActionOutcome | None, inventory: Inventory
) -> _Target:
    """The VM that speaks for proxy ``name`` once ``action`` went as ``outcome`` says."""
    host, domain, kind = action.host or "", action.domain or "", action.kind
    ok = outcome is not None and outcome.result is ActionResult.SUCCEEDED
    failure = f"{kind.value}: {outcome.error}" if outcome is not None and not ok else ""
    if ok and kind in (ActionKind.CREATE, ActionKind.REPLACE, ActionKind.START):
        return _Target(ProxyStatus(name, host, domain, state="running"), fresh=True)
    if kind is ActionKind.CREATE:
        failed = outcome is not None and outcome.result is ActionResult.FAILED
        return _Target(
            ProxyStatus(name, host, domain, "failed" if failed else "absent", detail=failure)
        )
    old = replaced(action)
    if kind is ActionKind.REPLACE and old is not None:
        serving = _observed(name, old.host, old.domain, inventory)
        return _Target(replace(serving, detail=failure))  # the old VM stays when a replace fails
    if kind is ActionKind.BLOCKED and not domain:
        blocked = f"blocked: {action.reason}"
        if old is not None:  # a blocked replace: the old VM still serves
            serving = _observed(name, old.host, old.domain, inventory)
            return _Target(replace(serving, detail=blocked))
        return _Target(ProxyStatus(name, host, state="absent", detail=blocked))
    status = _observed(name, host, domain, inventory)
    if failure:
        status = replace(status, detail=failure)
    elif kind in (ActionKind.BLOCKED, ActionKind.ABANDON):
        status = replace(status, detail=f"{kind.value}: {action.reason}")
    elif kind is ActionKind.KEEP and action.reason != UP_TO_DATE:
        status = replace(status, detail=action.reason)  # why a VM that is not right stays
    return _Target(status)


def _observed(name: str, host: str, domain: str, inventory: Inventory) -> ProxyStatus:
    found = inventory.host(host)
    if found is None or not found.reachable:
        return ProxyStatus(name, host, domain, state="unknown", detail=f"host {host} unreachable")
    state = next((d.state.value for d in found.domains if d.name == domain), "absent")
    return ProxyStatus(name, host, domain, state=state)


def _check_target(
    repo: Repo,
    target: _Target,
    hosts: Mapping[str, Hypervisor],
    prober: Prober,
    settings: ApplySettings,
    runtime: Runtime,
) -> ProxyStatus:
    status = target.status
    if status.state == "unknown":
        return replace(status, health=Health.UNKNOWN)
    if status.state in ("failed", "absent"):
        return replace(status, health=Health.UNHEALTHY)
    if status.state != DomainState.RUNNING.value:
        return replace(
            status, health=Health.UNHEALTHY, detail=status.detail or f"VM is {status.state}"
        )
    hypervisor = hosts.get(status.host)
    proxy = repo.proxy(status.name)
    if hypervisor is None:
        return status
    health = proxy.health if proxy is not None else fleet.HealthCheck()
    wait = settings.ip_wait_timeout if target.fresh else 0.0
    checked = check_vm(
        hypervisor, status.domain, health, prober, wait=wait, settings=settings, runtime=runtime
    )
    detail = "; ".join(d for d in (status.detail, checked.detail) if d)
    if not checked.found:
        return replace(status, state="absent", health=Health.UNHEALTHY, detail=detail)
    return replace(status, ip=checked.ip, health=checked.health, detail=detail)


def await_healthy(
    host: Hypervisor,
    domain: str,
    health: fleet.HealthCheck,
    prober: Prober,
    *,
    settings: ApplySettings,
    runtime: Runtime,
) -> tuple[VmHealth, str]:
    """Wait up to ``settings.replace_timeout`` for ``domain`` to pass its health check.

    Returns the check and "" when healthy, else the check and why not.
    """
    checked = check_vm(
        host,
        domain,
        health,
        prober,
        wait=settings.replace_timeout,
        settings=settings,
        runtime=runtime,
    )
    if checked.health is Health.HEALTHY:
        return checked, ""
    why = checked.detail or "no health check passed"
    if runtime.stop.is_set():
        why = f"shutdown requested while waiting ({why})"
    return checked, why
