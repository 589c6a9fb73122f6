"""The fleet's proxies as Prometheus HTTP service discovery targets (``http_sd_configs``).

The document is a JSON list of target groups; each proxy with a known address is one
group, ``<address>:<port>`` with the labels ``fleet``, ``proxy``, ``zone``, ``set``,
``host`` and ``health`` (healthy, unhealthy or unknown), so that a Prometheus scrapes
or blackbox-probes every proxy without a hand-kept list, and an alert can tell a proxy
the reconciler already knows to be unhealthy (docs/clients.md has the jobs).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

from reconciler.model.report import Member


def http_sd(fleet: str, members: Sequence[Member]) -> list[dict[str, Any]]:
    """One target group per member with an address, sorted by proxy name."""
    groups = []
    for member in sorted(members, key=lambda m: m.proxy):
        if not member.address:
            continue
        groups.append(
            {
                "targets": [_target(member.address, member.port)],
                "labels": {
                    "fleet": fleet,
                    "proxy": member.proxy,
                    "zone": member.zone,
                    "set": member.proxy_set,
                    "host": member.host,
                    "health": member.health.value,
                },
            }
        )
    return groups


def _target(address: str, port: int) -> str:
    if ipaddress.ip_address(address).version == 6:
        return f"[{address}]:{port}"
    return f"{address}:{port}"
