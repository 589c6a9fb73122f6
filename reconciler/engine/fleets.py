"""Several fleets in one daemon, spread over the daemons that share a coordination service.

``FleetsDaemon`` runs one ``Daemon`` per fleet of the config's ``fleets`` list, each
with its own loop, triggers, repo checkout, engine and lock, in threads of one
process, and around them what a process has once: the HTTP endpoint (``/metrics``
with a ``fleet`` label on every series, ``/healthz`` with a line per fleet, ``/hook``
for all fleets), signals (SIGHUP: every fleet runs; SIGTERM: every loop stops),
systemd's notifications and watchdog, and the fleet ring's refresher.

The refresher renews this daemon's place on the ring every ``poll`` seconds and reads
who owns which fleet (reconciler.ports.ring). Each fleet's leadership watcher reads that
view at its own poll and takes, keeps, hands over or leaves the fleet's lock
(core.assignment); a fleet that comes to this daemon is reconciled at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping

from reconciler.engine.daemon import Daemon
from reconciler.engine.endpoints import sd_targets
from reconciler.engine.parts import endpoints, start_watchdog
from reconciler.engine.triggers import TriggerQueue, install_signals
from reconciler.errors import CoordinationError
from reconciler.model.settings import DaemonSettings
from reconciler.ports.metrics import Exposition
from reconciler.ports.notifier import Notifier
from reconciler.ports.ring import FleetRing
from reconciler.ports.surface import SurfaceFactory

log = logging.getLogger(__name__)


class FanOut(TriggerQueue):
    """A trigger queue whose ``fire`` reaches every fleet's loop (signals, the webhook)."""

    def __init__(self, queues: list[TriggerQueue]) -> None:
        super().__init__()
        self._queues = queues

    def fire(self, reason: str) -> None:
        for queue in self._queues:
            queue.fire(reason)


class FleetsDaemon:
    """See the module docstring. ``daemons`` maps fleet id -> its Daemon (built with
    ``serve_http=False``, ``handle_signals=False`` and this object's ``stop``)."""

    def __init__(
        self,
        settings: DaemonSettings,
        daemons: Mapping[str, Daemon],
        *,
        ring: FleetRing,
        metrics: Exposition,
        surface: SurfaceFactory,
        stop: threading.Event,
        poll: float,
        notifier: Notifier,
        handle_signals: bool = True,
    ) -> None:
        self.settings = settings
        self.daemons = dict(daemons)
        self.ring = ring
        self.stop = stop
        self.poll = poll
        self.triggers = FanOut([d.triggers for d in self.daemons.values()])
        self._notifier = notifier
        self._handle_signals = handle_signals
        self._ring_trouble = ""
        self.http = surface(
            endpoints(
                settings,
                metrics,
                health=self.health,
                triggers=self.triggers,
                targets=lambda: [t for d in self.daemons.values() for t in sd_targets(d.reports)],
            )
        )

    # -- what the HTTP endpoint and the watchdog ask -------------------------

    def leading(self) -> list[str]:
        return [f for f, d in self.daemons.items() if d.leadership and d.leadership.leading]

    def health(self) -> tuple[bool, str]:
        """Healthy while every fleet's loop is (a loop that stands by is healthy). The first
        line sums up; then one line per fleet, ``<fleet>: `` and that fleet's own answer."""
        answers = {fleet: d.health() for fleet, d in self.daemons.items()}
        ok = all(healthy for healthy, _ in answers.values())
        leading = self.leading()
        trouble = f"; ring: {self._ring_trouble}" if self._ring_trouble else ""
        head = (
            f"{'ok' if ok else 'stale'}: leading {len(leading)} of {len(answers)} fleets"
            f" ({', '.join(leading) or 'none'}) as ring member {self.ring.member}{trouble}"
        )
        lines = [f"{fleet}: {text}" for fleet, (_, text) in answers.items()]
        return ok, "\n".join([head, *lines])

    def summary(self) -> str:
        leading = self.leading()
        return (
            f"Leading {len(leading)} of {len(self.daemons)} fleets "
            f"({', '.join(leading) or 'none'}) as {self.ring.member}"
        )

    def alive(self) -> bool:
        return all(d.alive() for d in self.daemons.values())

    # -- the loop ------------------------------------------------------------

    def refresh(self) -> None:
        """One look at the ring; a failure is logged once and shown on /healthz."""
        try:
            self.ring.refresh()
        except CoordinationError as exc:
            if self._ring_trouble != str(exc):
                log.warning("Cannot read the fleet ring: %s. Keeping the last view.", exc)
            self._ring_trouble = str(exc)
            return
        if self._ring_trouble:
            log.info("The fleet ring answers again.")
        self._ring_trouble = ""

    def run(self) -> int:
        restore = install_signals(self.triggers, self.stop) if self._handle_signals else None
        self.http.start()
        self.refresh()
        threads = [
            self._thread("ring", self._refresh_loop),
            *(self._thread(f"fleet-{fleet}", d.run) for fleet, d in self.daemons.items()),
        ]
        for daemon in self.daemons.values():
            if daemon.leadership is not None:
                daemon.leadership.listen(lambda fleet, on: self._notifier.status(self.summary()))
        pinger = self._start_watchdog()
        self._notifier.ready(f"Starting {len(self.daemons)} fleets; first reconciles now")
        code = 0
        try:
            while not self.stop.wait(1.0):
                if not all(t.is_alive() for t in threads):
                    log.error("A fleet's loop ended on its own; stopping every fleet.")
                    code = 1
                    break
        finally:
            self._notifier.stopping("Stopping")
            self.stop.set()
            self.triggers.fire("stop")
            for thread in threads:
                thread.join(timeout=60)
            self.ring.close()
            self.http.stop()
            if pinger is not None:
                pinger.join(timeout=5)
            if restore is not None:
                restore()
        log.info("Stopped.")
        return code

    def _thread(self, name: str, target: Callable[[], object]) -> threading.Thread:
        thread = threading.Thread(target=target, name=name, daemon=True)
        thread.start()
        return thread

    def _refresh_loop(self) -> None:
        while not self.stop.wait(self.poll):
            started = time.monotonic()
            self.refresh()
            if time.monotonic() - started > self.poll * 3:
                log.warning("Reading the fleet ring took %.1f s.", time.monotonic() - started)

    def _start_watchdog(self) -> threading.Thread | None:
        return start_watchdog(self._notifier, self.stop, self.alive)
