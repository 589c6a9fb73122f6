"""A rollout by the daemon, watched from outside: when each new VM was defined and when it
first answered, and how long a VM killed meanwhile stays down.

Since runs no longer wait for a boot (issue 39), no action's duration is a VM's
create-to-healthy any more: the run that makes a new VM returns, and a later run finds it
healthy. The floor of rows 6 and 6b is therefore measured beside the daemon, not read from
it: a thread lists the host's domains every ``EVERY`` s (a new domain's first listing is
its create, within one period) and probes each new domain's own address (its DHCP lease)
through squid until it answers 204 (its boot to healthy, within one period). A new VM's
create-to-healthy is the second minus the first: what a run that waited would have taken.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import libvirt

from lab.answering import probe
from lab.hosts import processes_in_netns
from lab.sampling import Periodic

EVERY = 1.0
"""Seconds between two looks at the host."""
LOG_TIME = re.compile(r"^time=(\S+Z) ")
MAC = re.compile(r"<mac address=.([0-9a-f:]{17}).")


class NewVms(Periodic):
    """Watches the domains of ``prefix`` that are not in ``old``, in a thread: first listed
    (``defined``) and first answering the probe through squid (``healthy``), epoch seconds."""

    def __init__(
        self, conn: Any, prefix: str, old: Iterable[str], *, url: str, leases: Path
    ) -> None:
        super().__init__(EVERY)
        self.conn = conn
        self.leases = leases
        self.prefix = prefix
        self.old = frozenset(old)
        self.url = url
        self.defined: dict[str, float] = {}
        self.healthy: dict[str, float] = {}
        self.listed: frozenset[str] = frozenset()

    def create_to_healthy(self) -> list[float]:
        return [self.healthy[d] - self.defined[d] for d in sorted(self.healthy)]

    def look(self) -> None:
        now = time.time()
        try:
            domains = {d.name(): d for d in self.conn.listAllDomains(0)}
        except libvirt.libvirtError:  # a lost look is no evidence; the next one counts
            return
        self.listed = frozenset(n for n in domains if n.startswith(self.prefix))
        for name in self.listed - self.old:
            self.defined.setdefault(name, now)
            with contextlib.suppress(libvirt.libvirtError):  # gone since the listing
                if name not in self.healthy and self._answers(domains[name]):
                    self.healthy[name] = time.time()

    def _answers(self, domain: Any) -> bool:
        """True when an address the host's dnsmasq leased to one of ``domain``'s MACs
        answers the probe through squid."""
        macs = set(MAC.findall(domain.XMLDesc(0)))
        try:
            lines = self.leases.read_text().splitlines()
        except OSError:
            return False
        ips = [f[2] for f in map(str.split, lines) if len(f) >= 3 and f[1] in macs]
        return any(probe(ip, self.url, timeout=3.0)[0] == 204 for ip in ips)


def kill_qemu(netns: str, domain: str) -> float:
    """SIGKILL the QEMU of ``domain`` in the lab host's namespace: epoch seconds of the kill."""
    for proc in processes_in_netns(netns):
        if proc.name.startswith("qemu-system") and f"guest={domain}," in proc.cmdline:
            os.kill(proc.pid, signal.SIGKILL)
            return time.time()
    raise SystemExit(f"no QEMU process of {domain} in {netns}")


def logged_at(text: str, needle: str) -> float | None:
    """Epoch seconds of the first daemon log line holding ``needle``; None: none yet."""
    for line in text.splitlines():
        if needle in line and (found := LOG_TIME.match(line)):
            stamp = datetime.strptime(found.group(1), "%Y-%m-%dT%H:%M:%S.%fZ")
            return stamp.replace(tzinfo=UTC).timestamp()
    return None
