"""Step 6 of a cycle: is each proxy there, does it have an IP, does it proxy?

For a VM: its IPv4 addresses as the host adapter finds them (guest agent
first, ARP / DHCP leases after: the adapter owns that order), then a request
through the proxy at each address until one answers as the manifest's
``health`` expects. A VM created in this run may need a while for an IP, so
the check can wait, bounded, polling at ``poll_interval``.

A proxy whose new VM is not healthy yet (booting, or failed: a halted rollout)
while its old VM still runs is reported as what serves it: both are probed,
and when only the old one answers, the proxy is that VM, healthy, its detail
naming the new VM and why it is not. The history gets every VM's check, so the
planner sees the new VM's health too. The executor's delete uses the same
check, once, before the old VM of a replace goes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from functools import partial

from reconciler.core.status.targets import Target
from reconciler.core.status.targets import targets as find_targets
from reconciler.engine.runtime import Runtime
from reconciler.errors import HostError, NotFoundError, TransientError
from reconciler.logfields import carry
from reconciler.model import Inventory, Plan, Repo, fleet
from reconciler.model.report import ActionOutcome, Health, ProxyState, ProxyStatus
from reconciler.model.settings import ApplySettings
from reconciler.ports.hypervisor import Hypervisor
from reconciler.ports.prober import Prober
from reconciler.progress import ProgressEvent
from reconciler.progress import emit as emit_progress

log = logging.getLogger(__name__)


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
            log.debug("Proxy VM %s on %s passed its health check at %s.", domain, host.name, ip)
            return VmHealth(ip=ip, health=Health.HEALTHY, detail=outcome.detail), True
        details.append(f"{ip}: {outcome.detail}")
    log.debug("Proxy VM %s on %s failed its health check: %s", domain, host.name, details)
    return VmHealth(ip=addresses[0], health=Health.UNHEALTHY, detail="; ".join(details)), False


@dataclass(frozen=True, slots=True)
class Checked:
    """The check of a run: one status per proxy, as served, and every VM probed."""

    proxies: tuple[ProxyStatus, ...]
    vms: tuple[ProxyStatus, ...]
    """Each VM looked at, the new and the old VM of a proxy in a replace each on its own:
    what the history records."""


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
) -> Checked:
    """One ProxyStatus per proxy of the repo and per owned VM the plan still lists.

    The VM that speaks for a proxy is the one the plan keeps, created, started
    or (when a replace failed) left in place, or its old VM while that one
    serves and the new one does not; running ones on reachable hosts get an IP
    lookup and a probe, in parallel, VMs of this run waiting up to
    ``ip_wait_timeout`` for their IP.
    """
    results = {o.action: o for o in outcomes}
    targets = find_targets(repo, plan, inventory, results)
    if runtime.stop.is_set():  # shutting down: report what is known, probe nothing
        statuses = tuple(_unchecked(t.status) for t in targets)
        return Checked(statuses, statuses)
    waits = any(t.fresh for t in targets) and settings.ip_wait_timeout > 0
    with ThreadPoolExecutor(max(1, settings.check_concurrency), "check") as pool:
        look = partial(
            _check_target, repo, hosts=hosts, prober=prober, settings=settings, runtime=runtime
        )
        futures = [pool.submit(carry(_check_both), t, look) for t in targets]
        if waits:
            _watch(futures)
        both = [f.result() for f in futures]
    return Checked(
        proxies=tuple(reported for reported, _ in both),
        vms=tuple(vm for _, vms in both for vm in vms),
    )


def _check_both(
    target: Target, look: Callable[[Target], ProxyStatus]
) -> tuple[ProxyStatus, tuple[ProxyStatus, ...]]:
    """The proxy as served, and each VM checked (``look``): the old VM answers for a new
    one that does not (yet)."""
    new = look(target)
    if target.old is None or new.health is Health.HEALTHY:
        return new, (new,)
    old = look(Target(target.old))
    if old.health is not Health.HEALTHY:
        return new, (new, old)
    why = new.detail or f"VM is {new.state.value}"
    note = f"served by its old VM; new VM {new.domain} on {new.host}: {why}"
    return replace(old, detail=note), (new, old)


def _watch(futures: Sequence[Future[tuple[ProxyStatus, tuple[ProxyStatus, ...]]]]) -> None:
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
        status, _ = future.result()
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


def _unchecked(status: ProxyStatus) -> ProxyStatus:
    note = "not checked: shutdown requested"
    return replace(status, detail="; ".join(d for d in (status.detail, note) if d))


def _check_target(
    repo: Repo,
    target: Target,
    hosts: Mapping[str, Hypervisor],
    prober: Prober,
    settings: ApplySettings,
    runtime: Runtime,
) -> ProxyStatus:
    status = target.status
    if status.state is ProxyState.UNKNOWN:
        return replace(status, health=Health.UNKNOWN)
    if status.state in (ProxyState.FAILED, ProxyState.ABSENT):
        return replace(status, health=Health.UNHEALTHY)
    if status.state is not ProxyState.RUNNING:
        return replace(
            status, health=Health.UNHEALTHY, detail=status.detail or f"VM is {status.state.value}"
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
        return replace(status, state=ProxyState.ABSENT, health=Health.UNHEALTHY, detail=detail)
    return replace(status, ip=checked.ip, health=checked.health, detail=detail)
