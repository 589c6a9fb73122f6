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
from dataclasses import dataclass
from typing import Protocol

from reconciler.adapters.host import Hypervisor
from reconciler.engine.runtime import Runtime
from reconciler.errors import HostError, NotFoundError, TransientError
from reconciler.model import fleet
from reconciler.model.report import Health
from reconciler.model.settings import ApplySettings

log = logging.getLogger(__name__)


class ProbeOutcome(Protocol):
    """What a probe says: healthy or not, and why in one sentence."""

    @property
    def healthy(self) -> bool: ...

    @property
    def detail(self) -> str: ...


class Prober(Protocol):
    """Sends one request through the proxy at ``ip`` as ``health`` describes."""

    def probe(self, ip: str, health: fleet.Health) -> ProbeOutcome: ...


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
    health: fleet.Health,
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
    host: Hypervisor, domain: str, health: fleet.Health, prober: Prober
) -> tuple[VmHealth, bool]:
    """One look; the flag says whether waiting longer could change the answer."""
    try:
        addresses = host.addresses(domain)
    except NotFoundError:
        return VmHealth(detail=f"domain {domain} not found on host {host.name}", found=False), True
    except TransientError as exc:
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
