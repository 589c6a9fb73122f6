"""The daemon around one reconcile cycle: triggers, the loop, health, status, metrics.

``Daemon.run`` serves HTTP, watches the repo when it is local, tells systemd
it is ready, and then runs the cycle whenever a trigger asks for it, one at a
time. After each cycle it records metrics, writes the status back to the repo
and updates systemd's STATUS. SIGTERM sets ``stop``: the cycle finishes the
action in flight and starts no new one, the loop ends and ``run`` returns 0.

While a run leaves a new VM that is not healthy yet (``RunReport.settling``:
created, replaced or started by the run, or created less than
``replace_timeout`` ago and still booting), or finds one healthy for the first
time beside its old VM (the next plan hands over), the next run comes ``FOLLOW_UP``
seconds later instead of an interval later, and the interval takes over once
every new VM is healthy or no longer new. A run that found such a first pass
(``RunReport.handover``) brings the next one at once (``HANDOVER``): that plan
deletes the old VM and starts the zone's next replace, and nothing is left to
wait for.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime

from reconciler.core.status.conditions import run_failed
from reconciler.engine.control import Finished, RunBoard
from reconciler.engine.cycle import Cycle
from reconciler.engine.cycle import source_cycle as source_cycle  # where callers found it
from reconciler.engine.endpoints import sd_targets
from reconciler.engine.parts import DaemonParts, endpoints, start_watchdog
from reconciler.engine.runtime import Runtime
from reconciler.engine.steps import relay_to
from reconciler.engine.triggers import IntervalSchedule, RepoWatcher, TriggerQueue, install_signals
from reconciler.errors import SourceError
from reconciler.logfields import start_run
from reconciler.model.checkout import Checkout
from reconciler.model.report import RunReport, RunResult
from reconciler.model.settings import DaemonSettings
from reconciler.ports.source import Source

log = logging.getLogger(__name__)

FOLLOW_UP = 30.0
"""Seconds to the next run while a new VM is not healthy yet (``RunReport.settling``): a
restart, or a create, reaches "healthy" in about a boot's time, not an interval's."""
HANDOVER = 1.0
"""Seconds to the next run after one whose check found a replace's new VM healthy for the
first time beside its old VM (``RunReport.handover``): the handover, and the zone's next
replace, need no wait. It comes once per such VM: its next check is not a first pass."""


class ObservedSource:
    """A Source that reports each sync's outcome (for ``proxyfleet_source_up``)."""

    def __init__(self, inner: Source, on_result: Callable[..., None]) -> None:
        self._inner = inner
        self._on_result = on_result

    def sync(self) -> Checkout:
        try:
            checkout = self._inner.sync()
        except SourceError:
            self._on_result(ok=False)
            raise
        self._on_result(ok=not checkout.fetch_error)
        return checkout


class Daemon:
    """Runs ``cycle`` on every trigger until ``stop`` is set. See the module docstring."""

    def __init__(
        self,
        settings: DaemonSettings,
        cycle: Cycle,
        parts: DaemonParts,
        *,
        runtime: Runtime | None = None,
        handle_signals: bool = True,
        follow_up: float = FOLLOW_UP,
    ) -> None:
        """``runtime``: time, chance, the stop flag and the engine's heartbeat (share the
        engine's, so that the watchdog sees actions finish); the real ones by default.
        ``parts.surface`` None: no endpoint of its own (one fleet of several, whose
        endpoint the FleetsDaemon serves)."""
        runtime = runtime if runtime is not None else Runtime.interruptible()
        self.settings = settings
        self.leadership = parts.leadership
        self.stop = runtime.stop
        self.triggers = TriggerQueue()
        self.runs = RunBoard(lambda: self.triggers.fire("reconcile"))
        """Runs asked for over the control socket and who waits for them (engine.control)."""
        self.metrics = parts.metrics
        self.reports: list[RunReport] = []
        """Reports of the last cycles, newest last; appended once metrics and status are written."""
        self._cycle = cycle
        self._status = parts.status
        self._notifier = parts.notifier
        self._clock = runtime.clock
        self._monotonic = runtime.monotonic
        self._schedule = IntervalSchedule(settings.interval, settings.jitter, random=runtime.random)
        self._handle_signals = handle_signals
        self._follow_up = max(follow_up, 0.0)
        self.next_wait: tuple[float, str] | None = None
        """Seconds from the end of the last run to the next scheduled one, and its reason."""
        self._started_at = self._monotonic()
        self._last_completed: float | None = None
        self._cycle_started: float | None = None
        self._heartbeat = runtime.heartbeat
        self._lock = threading.Lock()
        self.http = (
            parts.surface(
                endpoints(
                    settings,
                    self.metrics,
                    health=self.health,
                    triggers=self.triggers,
                    targets=lambda: sd_targets(self.reports),
                )
            )
            if parts.surface is not None
            else None
        )

    # -- what the HTTP endpoint and the watchdog ask -------------------------

    def health(self) -> tuple[bool, str]:
        """Healthy while the last completed cycle (or the start) is younger than 3 intervals.
        A last run that reached no host says ``degraded`` first, still healthy (200): the
        daemon works, its hosts do not (ProxyfleetHostDown alerts on them)."""
        with self._lock:
            since = self._last_completed if self._last_completed is not None else self._started_at
        age = self._monotonic() - since
        limit = 3 * self.settings.interval
        what = "last cycle completed" if self._last_completed is not None else "started"
        text = f"{what} {age:.0f}s ago (limit {limit:.0f}s)"
        degraded = unreached(self.reports[-1]) if self.reports else ""
        if self.leadership is None:
            if age >= limit:
                return False, f"stale: {text}"
            return True, f"{degraded}; {text}" if degraded else f"ok: {text}"
        role = self.leadership.describe()
        if age >= limit:
            return False, f"stale: {text}; {role}"
        if degraded and self.leadership.leading:
            return True, f"{degraded}; {role}; {text}"
        return True, ("ok: " if self.leadership.leading else "standby: ") + f"{role}; {text}"

    def alive(self) -> bool:
        """False only when one cycle has gone too long without finishing an action (hung):
        no more WATCHDOG=1. A long rollout that keeps finishing replaces is alive."""
        with self._lock:
            started = self._cycle_started
        if started is None:
            return True
        last = self._heartbeat.last
        if last is not None and last > started:
            started = last
        hung_after = max(3 * self.settings.interval, self.settings.hung_after)
        return self._monotonic() - started < hung_after

    # -- the loop ------------------------------------------------------------

    def run(self) -> int:
        restore = install_signals(self.triggers, self.stop) if self._handle_signals else None
        if self.http is not None:
            self.http.start()
        watcher = self._start_watcher()
        pinger = self._start_watchdog()
        if self.leadership is not None:
            leadership = self.leadership
            leadership.listen(lambda fleet, leading: self._notifier.status(leadership.describe()))
            leadership.watch(self.stop, lambda: self.triggers.fire("leader"))
        self._notifier.ready("Starting; first reconcile now")
        self.triggers.fire("startup")
        deadline, due = self._monotonic(), "interval"
        try:
            while not self.stop.is_set():
                reasons = self.triggers.take(max(0.0, deadline - self._monotonic()))
                if self.stop.is_set():
                    break
                reasons = tuple(r for r in reasons if r != "stop")
                if not reasons:
                    if self._monotonic() < deadline:
                        continue
                    reasons = (due,)
                report = self.run_once(reasons)
                wait, due = self.wait_after(report)
                self.next_wait = (wait, due)
                deadline = self._monotonic() + wait
        finally:
            self._notifier.stopping("Stopping")
            self.stop.set()
            self.runs.close()
            if self.http is not None:
                self.http.stop()
            if watcher is not None:
                watcher.join(timeout=5)
            if pinger is not None:
                pinger.join(timeout=5)
            if restore is not None:
                restore()
            if self.leadership is not None:
                self.leadership.close()
        log.info("Stopped.")
        return 0

    def wait_after(self, report: RunReport | None) -> tuple[float, str]:
        """Seconds to the next run after ``report``, and the reason it will run for.

        The jittered interval; ``FOLLOW_UP`` seconds instead while the report
        names new VMs that are not healthy yet, unless the interval is sooner;
        ``HANDOVER`` seconds when its check found a replace's new VM healthy for
        the first time beside its old VM.
        """
        wait = self._schedule.next_wait()
        if report is not None and report.handover and self._follow_up > 0 and wait > HANDOVER:
            log.info(
                "%d new VM(s) passed their first health check beside their old VM (%s); "
                "the handover runs in %.0f s.",
                len(report.handover),
                ", ".join(report.handover),
                HANDOVER,
            )
            return HANDOVER, "handover"
        if report is None or not report.settling or self._follow_up <= 0 or wait <= self._follow_up:
            return wait, "interval"
        log.info(
            "%d new VM(s) not healthy yet (%s); next run in %.0f s.",
            len(report.settling),
            ", ".join(report.settling),
            self._follow_up,
        )
        return self._follow_up, "follow-up"

    def run_once(self, reasons: Sequence[str]) -> RunReport | None:
        """One cycle now, then metrics, status and systemd STATUS (None: standing by).
        Its log lines are its steps on ``runs`` for the ``reconcile`` waiting on it."""
        relay_to(self.runs)
        number = self.runs.start()
        start_run(str(number))
        log.info("Reconcile started (%s).", ", ".join(reasons))
        self._notifier.status(f"Reconciling ({', '.join(reasons)})")
        with self._lock:
            self._cycle_started = self._monotonic()
        started = self._clock()
        try:
            report = self._cycle(self.stop)
        except Exception as exc:  # a bug in one cycle must not end the daemon
            log.error("The reconcile cycle failed: %s", exc, exc_info=True)
            report = _failed(exc, started=started, finished=self._clock())
        with self._lock:
            self._cycle_started = None
            self._last_completed = self._monotonic()
        if report is None:
            role = self.leadership.describe() if self.leadership is not None else "standby"
            log.info("Reconcile finished: nothing done, %s.", role)
            self._notifier.status(f"Standby: {role}")
            self.runs.finish(Finished(number, None, role if self.leadership is not None else ""))
            return None
        self._report(report)
        self.reports = [*self.reports[-9:], report]
        summary = _summary(report)
        log.info("Reconcile finished: %s.", summary)
        role = self.leadership.describe() if self.leadership is not None else ""
        if role:
            summary = f"{summary}; {role}"
        self._notifier.status(summary)
        self.runs.finish(Finished(number, report, role))
        return report

    def _report(self, report: RunReport) -> None:
        """Metrics and the status branch; a failure of either is logged and counted, never
        raised: a document on the status branch must not be able to end the daemon."""
        try:
            self.metrics.record(report)
        except Exception as exc:  # a bug or a hostile value must not end the loop
            log.error("Recording metrics failed: %s", exc, exc_info=True)
            self.metrics.report_failed("metrics")
        if self._status is None:
            return
        if self.leadership is not None and not self.leadership.held():
            # The lock went (lost, or handed over) during the run: the status branch is the
            # fleet's next leader's to write, not this run's, whose last calls were refused.
            log.info("Status not written: this daemon no longer leads the fleet.")
            return
        try:
            published = self._status.publish(report)
        except Exception as exc:  # as above: the status branch is untrusted input
            log.error("Writing the status failed: %s", exc, exc_info=True)
            self.metrics.report_failed("status")
            return
        if published.error:
            log.warning("Status not written back: %s", published.error)
            self.metrics.report_failed("status")

    def _start_watcher(self) -> RepoWatcher | None:
        local = self.settings.repo.local_path
        if local is None or not local.is_dir():
            return None
        watcher = RepoWatcher(local, self.settings.repo.branch, self.triggers.fire, self.stop)
        watcher.start()
        return watcher

    def _start_watchdog(self) -> threading.Thread | None:
        return start_watchdog(self._notifier, self.stop, self.alive)


def _failed(exc: Exception, *, started: datetime, finished: datetime) -> RunReport:
    message = f"{type(exc).__name__}: {exc}"
    return RunReport(
        started=started,
        finished=finished,
        result=RunResult.FAILED,
        problems=(message,),
        conditions=run_failed(message),
    )


def unreached(report: RunReport) -> str:
    """``degraded: no host could be reached (N of N)`` for a run that reached no host of
    several, else "": such a run succeeds at nothing, and must not read as "ok"."""
    if not report.hosts or any(h.reachable for h in report.hosts):
        return ""
    return f"degraded: no host could be reached ({len(report.hosts)} of {len(report.hosts)})"


def _summary(report: RunReport) -> str:
    ready = next((c for c in report.conditions if c.type == "Ready"), None)
    state = (
        "Ready" if ready is not None and ready.status else (ready.reason if ready else "unknown")
    )
    revision = report.revision[:12] or "no revision"
    degraded = f"{unreached(report)}; " if unreached(report) else ""
    return (
        f"{degraded}{report.result.value} at {revision} in {report.duration_seconds:.1f}s; "
        f"{state}; {len(report.proxies)} proxies, {len(report.problems)} problems"
    )
