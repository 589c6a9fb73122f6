"""Who holds a fleet's lock: the value the lock and ring seams (reconciler.ports.locks,
reconciler.ports.ring) hand out. Which process this is (``this_process``) is the lock
adapter's to say (reconciler.adapters.coordination.fleetlock)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds (or asks for) a fleet lock: named in refusals, /healthz and logs."""

    box: str
    """The management box's hostname."""
    pid: int
    role: str = "daemon"
    """``daemon`` or ``apply``: what kind of actor it is."""
    since: datetime | None = None
    """When it took the lock (UTC); None while it does not hold it."""

    def __str__(self) -> str:
        when = f", since {self.since:%Y-%m-%d %H:%M:%S} UTC" if self.since else ""
        return f"{self.role} on {self.box} (pid {self.pid}{when})"

    def holding(self, since: datetime) -> Holder:
        return Holder(self.box, self.pid, self.role, since)
