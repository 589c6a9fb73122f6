"""The report step's endpoints: the proxies' DNS names, published after each run.

``EndpointPublisher`` (reconciler.ports.dns) is the seam. The engine hands it the repo's
proxies as the run left them; what the server made of it becomes the report's ``dns``
and its DnsPublished condition; ``sd_targets`` is what ``GET /sd/proxies`` serves
(Prometheus HTTP service discovery). A DNS server that is down or refuses is a False
condition, never a failed run: VMs are reconciled whatever DNS does.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from reconciler.core.endpoints.records import members
from reconciler.core.endpoints.targets import http_sd
from reconciler.core.status.conditions import dns_published
from reconciler.model import Repo
from reconciler.model.report import DnsOutcome, DnsResult, RunReport
from reconciler.ports.dns import EndpointPublisher

log = logging.getLogger(__name__)


def publish(publisher: EndpointPublisher | None, repo: Repo, report: RunReport) -> RunReport:
    """``report`` with the proxies as clients see them (``members``: what ``/sd/proxies``
    serves) and what publishing their names did (nothing without a publisher)."""
    found = members(repo, report.proxies)
    report = dataclasses.replace(report, fleet=repo.fleet.name, members=found)
    if publisher is None:
        return report
    try:
        outcome = publisher.publish(repo.fleet.name, found)
    except Exception as exc:  # a bug in publishing must not lose the run's report
        log.error("Publishing the DNS names failed unexpectedly: %s", exc, exc_info=True)
        why = f"{type(exc).__name__}: {exc}"
        outcome = DnsOutcome(DnsResult.FAILED, reason="PublisherBug", error=why)
    conditions = (*report.conditions, dns_published(outcome))
    return dataclasses.replace(report, dns=outcome, conditions=conditions)


def sd_targets(reports: Sequence[RunReport]) -> list[dict[str, Any]]:
    """The Prometheus targets of the newest report that observed the fleet (a stalled or
    failed run observed nothing: the picture before it still holds); [] before any."""
    for report in reversed(reports):
        if report.plan is not None:
            return http_sd(report.fleet, report.members)
    return []
