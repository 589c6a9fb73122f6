"""One reconcile cycle: load -> observe -> plan -> apply -> check -> report.

The caller (the daemon, or ``proxyfleet apply``) has already fetched the
source and passes its directory and revision. A broken repo stops the cycle
before any host is contacted: the report is Stalled and lists every problem.
So does a repo the guards refuse (reconciler.engine.guards: another fleet's
id, an image the box does not allow, a shrink nobody acknowledged).
Nothing escapes as an exception: a bug becomes a FAILED report, logged with
its traceback.

``Engine`` holds what lives across cycles: one connection per host
(``HostPool``), the image cache, the prober, what earlier runs saw (the
history store: crash loops, failing probes, a halted rollout), the repo loader,
the image URL rule, settings and the runtime. Each is a seam (reconciler.ports);
the composition root (reconciler.cli.compose) hands the real ones in.
``prepare`` and ``finish`` split a cycle where ``apply`` asks the operator.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from reconciler.core.load.loadmemo import LoadMemo
from reconciler.core.load.repofiles import ReadLimits
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.core.plan.digest import Digests
from reconciler.core.plan.planner import plan as make_plan
from reconciler.core.status.conditions import after_plan, day2, run_failed, stalled
from reconciler.core.status.history import after_run, for_plan, with_since
from reconciler.core.status.hostcounts import after_run as hosts_after_run
from reconciler.core.status.settling import handover, settling
from reconciler.engine.check import check_proxies
from reconciler.engine.endpoints import publish
from reconciler.engine.executor import Executor
from reconciler.engine.guards import (
    DeleteWindow,
    check_identity,
    check_images,
    check_removed_hosts,
    check_shrink,
)
from reconciler.engine.observe import Observation, observe, size_bases
from reconciler.engine.pool import HostFactory, HostPool
from reconciler.engine.runtime import Runtime
from reconciler.errors import InvalidInput
from reconciler.logfields import bind
from reconciler.model import Plan, Repo
from reconciler.model.history import History
from reconciler.model.limits import Limits
from reconciler.model.plan import MUTATING
from reconciler.model.report import (
    ActionOutcome,
    ActionResult,
    ProxyStatus,
    RunReport,
    RunResult,
)
from reconciler.model.settings import ApplySettings, GuardSettings
from reconciler.ports.dns import EndpointPublisher
from reconciler.ports.history import HistoryStore
from reconciler.ports.hypervisor import Hypervisor
from reconciler.ports.images import ImageSource
from reconciler.ports.imageurls import UrlCheck, UrlRule
from reconciler.ports.prober import Prober
from reconciler.ports.repoloader import RepoLoader
from reconciler.ports.status import StatusReader

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A cycle up to its plan: what ``finish`` carries out."""

    started: datetime
    revision: str
    repo: Repo
    hosts: Mapping[str, Hypervisor]
    observation: Observation
    plan: Plan
    history: History = field(default_factory=History)
    """What earlier runs saw, as kept (the plan got it with the time and this revision's halts)."""


class Engine:
    """The reconcile machinery of one daemon (or one ``apply``), kept across cycles."""

    def __init__(
        self,
        host_factory: HostFactory,
        *,
        images: ImageSource,
        prober: Prober,
        history: HistoryStore,
        loader: RepoLoader,
        url_rule: UrlRule | None = None,
        settings: ApplySettings | None = None,
        runtime: Runtime | None = None,
        guards: GuardSettings | None = None,
        read_limits: ReadLimits | None = None,
        secrets: SecretAccess | None = None,
        endpoints: EndpointPublisher | None = None,
        last_status: StatusReader | None = None,
    ) -> None:
        self.pool = HostPool(host_factory)
        self.last_status = last_status
        """The fleet's last status document, for the removed-host guard; None: not read."""
        self.endpoints = endpoints
        """Where the proxies' DNS names go after each run; None: nowhere."""
        self.history = history
        self.loader = loader
        """Reads the repo at a directory (reconciler.ports.repoloader)."""
        self.url_rule = url_rule
        """The image cache's URL rule, asked before planning; None: image URLs unchecked."""
        self.images = images
        self.prober = prober
        self.settings = settings if settings is not None else ApplySettings()
        self.runtime = runtime if runtime is not None else Runtime.interruptible()
        self.guards = guards if guards is not None else GuardSettings()
        self.read_limits = read_limits if read_limits is not None else ReadLimits()
        # A plan must know every secret's value (its fingerprint is in the digest): without
        # an identity, a repo that references one is Stalled, never half-planned.
        self.secrets = secrets if secrets is not None else SecretAccess(need_values=True)
        self.deletes = DeleteWindow(
            self.guards.state_file,
            self.guards.delete_window,
            self.runtime.clock,
            cap=self.guards.max_deletes,
        )
        self.memo = LoadMemo()
        """What this engine's loads of its repo share (cloud-config findings, fingerprints)."""
        self.digests = Digests()
        """Digests its plans share: the same proxies are planned every cycle."""
        self.last_observation: Observation | None = None
        """What the last run observed, as soon as it has (``proxyfleet info`` reads VM
        provenance from it, ``get`` what a first run has seen so far)."""

    def load(self, root: Path) -> Repo:
        """The repo at ``root``, read within this engine's limits and with its secrets; raises
        InvalidInput. The daemon's cycle loads once with it and hands the repo back."""
        return self.loader(root, limits=self.read_limits, secrets=self.secrets, memo=self.memo)

    def reconcile_once(
        self, root: Path, *, revision: str, loaded: Repo | InvalidInput | None = None
    ) -> RunReport:
        """One full cycle over the repo checked out at ``root`` (commit ``revision``);
        ``loaded``: as ``load`` gave it (or its InvalidInput), None: loaded here."""
        bind(revision=revision[:12])
        started = self.runtime.clock()
        try:
            prepared = self.prepare(root, revision=revision, started=started, loaded=loaded)
            if isinstance(prepared, RunReport):
                return prepared
            return self.finish(prepared)
        except Exception as exc:  # the loop must survive its own bugs
            log.error("The reconcile run failed unexpectedly: %s", exc, exc_info=True)
            return RunReport(
                started=started,
                finished=self.runtime.clock(),
                result=RunResult.FAILED,
                revision=revision,
                problems=(f"{type(exc).__name__}: {exc}",),
                conditions=run_failed(f"{type(exc).__name__}: {exc}"),
            )

    def prepare(
        self,
        root: Path,
        *,
        revision: str,
        started: datetime | None = None,
        gate: Callable[[], None] | None = None,
        loaded: Repo | InvalidInput | None = None,
    ) -> Prepared | RunReport:
        """Load, observe and plan. A repo that does not load gives a Stalled report.

        Once the repo has loaded and passed its checks, every host starts dialling
        (``dial_ahead``) and ``gate`` runs, before anything is observed: ``apply`` takes
        the fleet lock there while the SSH handshakes run, and raises to stop.
        ``loaded``: the repo at ``root`` as the caller just loaded it with this engine's
        ``read_limits`` and ``secrets`` (``apply`` and the daemon's cycle, which needed its
        fleet's name first), or the InvalidInput that load raised; None: loaded here."""
        started = started if started is not None else self.runtime.clock()
        try:
            if isinstance(loaded, InvalidInput):
                raise loaded
            repo = loaded if loaded is not None else self.load(root)
        except InvalidInput as exc:
            problems = tuple(str(p) for p in exc.problems)
            log.error(
                "The fleet repo at %s has %d problem(s); nothing applied.",
                revision or root,
                len(problems),
            )
            return stalled_report(
                problems, revision=revision, started=started, finished=self.runtime.clock()
            )
        refusal = (
            check_identity(repo, self.guards.fleet)
            or check_images(repo, self._url_check())
            or check_removed_hosts(repo, self.last_status(root) if self.last_status else None)
        )
        if refusal is None:
            hosts = self.pool.sync(repo.fleet.hosts)
            for hypervisor in hosts.values():
                hypervisor.dial_ahead()
            if gate is not None:
                gate()
            observation = observe(repo.fleet, hosts, timeout=self.settings.observe_timeout)
            self.last_observation = observation
            refusal = check_shrink(repo, observation.inventory)
            if refusal is None:
                observation = size_bases(repo, observation, self.images)
        if refusal is not None:
            log.error("Revision %s refused: %s", revision or root, "; ".join(refusal.problems))
            return stalled_report(
                refusal.problems,
                revision=revision,
                started=started,
                finished=self.runtime.clock(),
                reason=refusal.reason,
            )
        kept = self.history.load()
        now = self.runtime.clock()
        left, why = self.deletes.left(repo.fleet.policy.max_deletes_per_run)
        limits = Limits(
            replace_timeout=self.settings.replace_timeout, deletes_left=left, deletes_why=why
        )
        plan = make_plan(
            repo,
            observation.inventory,
            for_plan(kept, now=now, revision=revision),
            limits,
            memo=self.digests,
        )
        log.info("Planned %s.", _summary(plan))
        return Prepared(started, revision, repo, hosts, observation, plan, kept)

    def _url_check(self) -> UrlCheck | None:
        allowed = self.guards.allowed_file_dirs
        if allowed is None or self.url_rule is None:
            return None
        return functools.partial(self.url_rule, allowed_file_dirs=allowed)

    def finish(self, prepared: Prepared) -> RunReport:
        """Apply the plan, check every proxy and build the report."""
        executor = Executor(
            prepared.hosts,
            images=self.images,
            prober=self.prober,
            revision=prepared.revision,
            settings=self.settings,
            runtime=self.runtime,
        )
        outcomes = executor.run(prepared.plan)
        self.deletes.record(outcomes)
        checked = check_proxies(
            prepared.repo,
            prepared.plan,
            prepared.observation.inventory,
            outcomes,
            prepared.hosts,
            self.prober,
            settings=self.settings,
            runtime=self.runtime,
        )
        finished = self.runtime.clock()
        kept = self._remember(prepared, outcomes, checked.vms, now=finished)
        proxies = with_since(checked.proxies, kept)
        report = build_report(prepared, outcomes, proxies, finished=finished)
        report = publish(self.endpoints, prepared.repo, report)
        handing = handover(
            checked.vms,
            inventory=prepared.observation.inventory,
            fleet=prepared.repo.fleet.name,
            history=prepared.history,
        )
        new = settling(
            outcomes,
            checked.vms,
            inventory=prepared.observation.inventory,
            fleet=prepared.repo.fleet.name,
            history=prepared.history,
            now=finished,
            window=self.settings.replace_timeout,
            handing=handing,
        )
        return dataclasses.replace(report, settling=new, handover=handing)

    def _remember(
        self,
        prepared: Prepared,
        outcomes: Sequence[ActionOutcome],
        vms: Sequence[ProxyStatus],
        *,
        now: datetime,
    ) -> History:
        """Fold this run (its plan's halts, its outcomes, every VM checked) into the history,
        keep it and return it."""
        halts = prepared.plan.halts
        history = after_run(
            prepared.history,
            inventory=prepared.observation.inventory,
            halts=halts,
            outcomes=outcomes,
            proxies=vms,
            now=now,
            suspect_zones=prepared.plan.suspect_zones,
        )
        new = [h for h in halts if h not in prepared.history.halts]
        if new:
            log.warning(
                "Rollout of %s halted: %s failed %s health check (%s).",
                prepared.revision[:12] or "this revision",
                ", ".join(h.proxy for h in halts),
                "their" if len(halts) > 1 else "its",
                "; ".join(f"{h.proxy}: {h.reason}" for h in new),
            )
        try:
            self.history.save(history)
        except OSError as exc:
            log.warning("The history of this run was not kept: %s", exc)
        return history

    def close(self) -> None:
        self.pool.close()


def stalled_report(
    problems: Sequence[str],
    *,
    revision: str,
    started: datetime,
    finished: datetime,
    reason: str = "ValidationFailed",
) -> RunReport:
    """Nothing attempted: the manifests (or, with another ``reason``, the source) are unusable."""
    message = f"{len(problems)} problem(s); nothing was planned or applied"
    return RunReport(
        started=started,
        finished=finished,
        result=RunResult.STALLED,
        revision=revision,
        problems=tuple(problems),
        conditions=stalled(reason, message),
    )


def build_report(
    prepared: Prepared,
    outcomes: Sequence[ActionOutcome],
    proxies: Sequence[ProxyStatus],
    *,
    finished: datetime,
) -> RunReport:
    results = [o.result for o in outcomes]
    result = RunResult.SUCCESS
    if any(r is not ActionResult.SUCCEEDED for r in results):
        result = RunResult.PARTIAL
    hosts = hosts_after_run(prepared.observation.hosts, outcomes)
    suspended = prepared.repo.fleet.policy.suspend
    return RunReport(
        started=prepared.started,
        finished=finished,
        result=result,
        revision=prepared.revision,
        plan=prepared.plan,
        outcomes=tuple(outcomes),
        proxies=tuple(proxies),
        hosts=hosts,
        conditions=(
            *after_plan(prepared.plan, outcomes, proxies, hosts, suspended=suspended),
            *day2(prepared.plan, prepared.plan.halts),
        ),
        suspended=suspended,
        halts=prepared.plan.halts,
    )


def _summary(plan: Plan) -> str:
    counts = plan.summary()
    mutating = sum(counts[k.value] for k in MUTATING)
    parts = [f"{n} {kind}" for kind, n in counts.items() if n]
    return f"{mutating} change(s): " + (", ".join(parts) if parts else "nothing")
