"""What the daemon answers on its control socket: a run now, the live state, one proxy.

``RunBoard`` ties a request for a run to the run that answers it: the first run
that *starts* after the request (a run already going when the request came may
have fetched the repo before it, so it does not count; the request's trigger
queues the next one, coalesced with any other, reconciler.engine.triggers).
While a run goes on, the board keeps its steps (the lines the daemon logs for it,
reconciler.engine.steps relays them), so that a waiter sees its run's progress.

``Control.handle`` serves the three commands (adapters.surface.controlsocket carries them):

- ``reconcile``: ``{"event": "queued"}`` at once, then ``{"event": "step", "message":
  ...}`` for each line the daemon logs during the run that answers, then ``{"event": "finished",
  "run": ...}`` with the run's summary, or ``{"event": "standby", "role": ...}``
  when this daemon stood by (naming the leader when the lock says who it is),
  or ``{"event": "stopping"}`` when the daemon stops first;
- ``get``: the daemon's picture from its last run, without a fetch or a host
  call: proxies and hosts as status.yaml has them, the run, and whether a run
  is going now; during the first run, what it has observed so far (``firstRun``:
  its hosts and the VMs it owns, not checked yet) or nothing yet;
- ``info``: one proxy: its VM, host, IP and health from the last run, where the
  VM came from (the commit and time of its create, from its metadata), its
  health history (the kept record: failing since, healthy once, restarts; and
  its state in each of the last runs the daemon holds).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reconciler.core.status import statusdoc
from reconciler.engine.observe import Observation
from reconciler.model.history import History
from reconciler.model.plan import ActionKind
from reconciler.model.report import ActionResult, ProxyState, ProxyStatus, RunReport


@dataclass(frozen=True, slots=True)
class Finished:
    """One run of the daemon, as its waiters learn it."""

    number: int
    report: RunReport | None
    """None: this daemon stood by and did nothing."""
    role: str
    """``Leadership.describe()`` after the run ("" without leadership)."""


MAX_STEPS = 2000
"""Lines of one run the board keeps for its waiters (the journal has every one)."""
MAX_STEP_LENGTH = 1000
"""Characters of one step line passed on; a longer line is cut."""


class RunBoard:
    """Run numbers, the going run's steps and waiters; every method is thread-safe. See
    the module docstring."""

    def __init__(self, fire: Callable[[], None]) -> None:
        self._fire = fire
        self._cond = threading.Condition()
        self._started = 0
        self._running = False
        self._last: Finished | None = None
        self._closed = False
        self._steps: list[str] = []
        """The lines of the going run (run number ``_started``), at most ``MAX_STEPS``."""

    def ask(self) -> int:
        """Ask for a run; the ticket ``wait`` takes."""
        with self._cond:
            ticket = self._started
        self._fire()
        return ticket

    def start(self) -> int:
        """A run starts (the daemon's loop calls this); its number."""
        with self._cond:
            self._started += 1
            self._running = True
            self._steps = []
            return self._started

    def note(self, line: str) -> None:
        """A step of the going run (a line the daemon logged); ignored between runs."""
        with self._cond:
            if self._running and len(self._steps) < MAX_STEPS:
                self._steps.append(line[:MAX_STEP_LENGTH])
                self._cond.notify_all()

    def finish(self, finished: Finished) -> None:
        with self._cond:
            self._last = finished
            self._running = False
            self._cond.notify_all()

    def close(self) -> None:
        """The daemon stops: every waiter returns now."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    @property
    def running(self) -> bool:
        with self._cond:
            return self._running

    def wait(self, ticket: int, timeout: float | None = None) -> Finished | None:
        """The first run started after ``ticket`` once it finished; None when the daemon
        stops first or ``timeout`` seconds pass."""

        def answered() -> bool:
            return self._closed or (self._last is not None and self._last.number > ticket)

        with self._cond:
            self._cond.wait_for(answered, timeout)
            last = self._last
            if last is not None and last.number > ticket:
                return last
            return None

    def follow(self, ticket: int) -> Iterator[str | Finished]:
        """The steps of the first run started after ``ticket`` as they are noted, then that
        run's Finished; ends without it when the daemon stops first."""
        seen = 0

        def ours() -> list[str]:
            # only the run that answers the ticket (not one going when it was asked); its
            # steps stay until the next run starts, so none is lost to its finish
            return self._steps if self._started == ticket + 1 else []

        def news() -> bool:
            finished = self._last is not None and self._last.number > ticket
            return self._closed or finished or len(ours()) > seen

        while True:
            with self._cond:
                self._cond.wait_for(news)
                last = self._last
                if last is not None and last.number > ticket:
                    steps, finished = ours()[seen:], last
                elif self._closed:
                    return
                else:
                    steps, finished = ours()[seen:], None
                seen += len(steps)
            yield from steps
            if finished is not None:
                yield finished
                return


class Control:
    """The control socket's handler (``handle``), over the daemon's own state."""

    def __init__(
        self,
        board: RunBoard,
        *,
        reports: Callable[[], Sequence[RunReport]],
        role: Callable[[], str],
        history: Callable[[], History] | None = None,
        observed: Callable[[], Observation | None] | None = None,
        standby: Callable[[], bool] | None = None,
    ) -> None:
        """``reports``: the daemon's last reports, newest last; ``role``: its standing
        ("" without leadership); ``history``: the engine's kept history; ``observed``:
        what the last (or the first, going) run observed: VM provenance, and ``get``
        before a run has finished; ``standby``: True while another
        daemon leads the fleet (``get`` and ``info`` then name it instead of answering
        from an old picture)."""
        self._board = board
        self._reports = reports
        self._role = role
        self._history = history
        self._observed = observed
        self._standby = standby

    def handle(
        self, request: Mapping[str, Any], reply: Callable[[Mapping[str, Any]], None]
    ) -> None:
        command = request.get("command")
        if command in ("get", "info") and self._standby is not None and self._standby():
            reply({"standby": True, "role": self._role()})
        elif command == "reconcile":
            self._reconcile(reply)
        elif command == "get":
            reply(self.get())
        elif command == "info":
            name = request.get("name")
            if not isinstance(name, str) or not name:
                reply({"error": 'info needs a proxy "name"'})
                return
            reply(self.info(name))
        else:
            reply({"error": f"unknown command {command!r} (reconcile, get, info)"})

    def _reconcile(self, reply: Callable[[Mapping[str, Any]], None]) -> None:
        running = self._board.running
        ticket = self._board.ask()
        reply({"event": "queued", "runningNow": running, "role": self._role()})
        finished = None
        for step in self._board.follow(ticket):
            if isinstance(step, Finished):
                finished = step
            else:
                reply({"event": "step", "message": step})
        if finished is None:
            reply({"event": "stopping"})
        elif finished.report is None:
            reply({"event": "standby", "role": finished.role or self._role()})
        else:
            role = finished.role or self._role()
            reply({"event": "finished", "role": role, "run": run_summary(finished.report)})

    def get(self) -> dict[str, Any]:
        """The live picture: proxies, hosts and conditions as status.yaml would have them
        after the last run (a stalled run keeps the picture of the one before)."""
        answer: dict[str, Any] = {"role": self._role(), "reconciling": self._board.running}
        status = picture(self._reports())
        if status is None and answer["reconciling"]:
            observed = self._observed() if self._observed is not None else None
            return {**answer, "firstRun": True, "status": first_sight(observed)}
        return {**answer, "status": status}

    def info(self, name: str) -> dict[str, Any]:
        reports = list(self._reports())
        doc = picture(reports)
        if doc is None:
            going = "its first run is in progress" if self._board.running else "no run yet"
            return {"error": f"the daemon has not finished a run yet ({going})"}
        proxy = next((p for p in doc["proxies"] if p["name"] == name), None)
        if proxy is None:
            known = ", ".join(p["name"] for p in doc["proxies"]) or "none"
            return {"error": f"no proxy {name} in the daemon's last picture (proxies: {known})"}
        last = reports[-1]
        answer: dict[str, Any] = {
            "role": self._role(),
            "asOf": doc["updated"],
            "revision": doc["observedRevision"],
            "proxy": proxy,
            "provenance": self._provenance(reports, proxy),
            "history": self._record(proxy),
            "runs": [_in_run(r, name) for r in reversed(reports)],
        }
        halt = next((h for h in last.halts if h.proxy == name), None)
        if halt is not None:
            answer["halt"] = {
                "revision": halt.revision,
                "domain": halt.domain,
                "reason": halt.reason,
                "since": statusdoc.timestamp(halt.since),
            }
        return answer

    def _provenance(self, reports: Sequence[RunReport], proxy: Mapping[str, Any]) -> dict[str, Any]:
        """Where the VM came from: its metadata as last observed, else the run that made it."""
        host_name, domain_name = proxy.get("host", ""), proxy.get("domain", "")
        observed = self._observed() if self._observed is not None else None
        inventory = observed.inventory if observed is not None else None
        host = inventory.host(host_name) if inventory is not None and host_name else None
        domain = next((d for d in host.domains if d.name == domain_name), None) if host else None
        if domain is not None and domain.owner is not None:
            owner = domain.owner
            return {
                "revision": owner.revision,
                "created": owner.created,
                "digest": owner.digest,
                "image": owner.image_key,
                "imageSha256": owner.image_sha256,
                "base": owner.image_base,
            }
        for report in reversed(reports):
            for outcome in report.outcomes:
                action = outcome.action
                made = action.kind in (ActionKind.CREATE, ActionKind.REPLACE)
                if (
                    made
                    and outcome.result is ActionResult.SUCCEEDED
                    and action.proxy == proxy["name"]
                ):
                    return {
                        "revision": report.revision,
                        "created": f"by the run of {statusdoc.timestamp(report.started)}",
                        "digest": action.digest or "",
                    }
        return {}

    def _record(self, proxy: Mapping[str, Any]) -> dict[str, Any]:
        if self._history is None or not proxy.get("domain"):
            return {}
        record = self._history().record(proxy["host"], proxy["domain"])
        return {
            "failingSince": (
                statusdoc.timestamp(record.failing_since) if record.failing_since else None
            ),
            "healthyOnce": record.healthy_once,
            "healthySince": (
                statusdoc.timestamp(record.healthy_since) if record.healthy_since else None
            ),
            "restarts": [statusdoc.timestamp(when) for when in record.restarts],
        }


def picture(reports: Sequence[RunReport]) -> dict[str, Any] | None:
    """status.yaml's document after ``reports`` (oldest first), folded as the status writer
    does run after run; None before the first run."""
    doc: dict[str, Any] | None = None
    for n, report in enumerate(reports):
        runs = [statusdoc.run_entry(r) for r in reversed(reports[: n + 1])]
        doc = statusdoc.build(report, doc, runs=runs)
    return doc


NOT_CHECKED = "not checked yet: the daemon's first run is in progress"


def first_sight(observed: Observation | None) -> dict[str, Any] | None:
    """What a first run has observed so far, in status.yaml's shape (its hosts, and the
    fleet's VMs found on them, health unknown); None when it has observed nothing yet."""
    if observed is None:
        return None
    zones = {h.name: h.zone for h in observed.hosts}
    proxies = [
        ProxyStatus(
            domain.owner.proxy,
            host.name,
            domain.name,
            state=ProxyState.of(domain.state),
            detail=NOT_CHECKED,
            zone=zones.get(host.name, ""),
        )
        for host in observed.inventory.hosts
        for domain in host.domains
        if domain.owner is not None and domain.owner.fleet == observed.fleet
    ]
    return {
        "proxies": [statusdoc.proxy_entry(p) for p in sorted(proxies, key=lambda p: p.name)],
        "hosts": [statusdoc.host_entry(h) for h in sorted(observed.hosts, key=lambda h: h.name)],
    }


def run_summary(report: RunReport) -> dict[str, Any]:
    """A run as ``reconcile`` prints it: status.yaml's run entry plus the conditions."""
    entry = statusdoc.run_entry(report)
    entry["conditions"] = [
        {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message}
        for c in report.conditions
    ]
    entry["proxies"] = len(report.proxies)
    entry["healthy"] = sum(1 for p in report.proxies if p.health.value == "healthy")
    entry["blocked"] = [
        f"{a.proxy or a.domain}: {a.reason}"
        for a in (report.plan.actions if report.plan is not None else ())
        if a.kind is ActionKind.BLOCKED
    ]
    return entry


def _in_run(report: RunReport, name: str) -> dict[str, Any]:
    proxy = next((p for p in report.proxies if p.name == name), None)
    return {
        "finished": statusdoc.timestamp(report.finished),
        "revision": report.revision,
        "result": report.result.value,
        "state": proxy.state.value if proxy else ProxyState.ABSENT.value,
        "health": proxy.health.value if proxy else "",
        "domain": proxy.domain if proxy else "",
        "detail": proxy.detail if proxy else "",
    }
