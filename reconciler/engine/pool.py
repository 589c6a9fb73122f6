"""One hypervisor connection per host, kept across reconcile cycles.

The daemon reconciles every few minutes; dialling SSH every time would be
slow and noisy. ``HostPool.sync`` hands out the connections for the hosts of
the current fleet.yaml: it opens one for a new host, reopens one whose
connection settings changed, and closes those whose host left the file.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from reconciler.model import Host
from reconciler.ports.hypervisor import Hypervisor

log = logging.getLogger(__name__)

HostFactory = Callable[[Host], Hypervisor]
"""Builds the (lazy) connection to one host; it must not dial yet."""


class HostPool:
    def __init__(self, factory: HostFactory) -> None:
        self._factory = factory
        self._lock = threading.Lock()
        self._hosts: dict[str, tuple[Host, Hypervisor]] = {}

    def sync(self, hosts: Sequence[Host]) -> dict[str, Hypervisor]:
        """The connections for ``hosts``, by name; others are closed and forgotten."""
        wanted = {h.name: h for h in hosts}
        with self._lock:
            for name, (known, hypervisor) in list(self._hosts.items()):
                if wanted.get(name) != known:
                    why = "left fleet.yaml" if name not in wanted else "changed in fleet.yaml"
                    log.info("Closing the connection to host %s: it %s.", name, why)
                    del self._hosts[name]
                    _close(hypervisor)
            for name, host in wanted.items():
                if name not in self._hosts:
                    self._hosts[name] = (host, self._factory(host))
            return {name: self._hosts[name][1] for name in wanted}

    def close(self) -> None:
        """Close every connection (the daemon's shutdown)."""
        with self._lock:
            for _, hypervisor in self._hosts.values():
                _close(hypervisor)
            self._hosts.clear()


def _close(hypervisor: Hypervisor) -> None:
    try:
        hypervisor.close()
    except Exception:  # closing is best effort; the host may be gone already
        log.warning("Closing the connection to host %s failed.", hypervisor.name, exc_info=True)
