"""Prometheus metrics (prometheus-client, a registry of our own), fed from RunReports.

``Metrics.record`` is called once per cycle with its RunReport;
``Metrics.observe_rpc`` is the hook the host adapter's tracer is given (it is
injected, never imported there) to time every libvirt call.

A daemon serving several fleets keeps one ``Metrics`` per fleet and serves
``FleetMetrics``: every series of every fleet, with a ``fleet`` label added
(``proxyfleet_leader`` has its own already; ``proxyfleet_build_info`` once).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from reconciler.buildinfo import build
from reconciler.model.fleet import HostState
from reconciler.model.plan import ActionKind
from reconciler.model.report import DnsOutcome, DnsResult, Health, RunReport, RunResult

CONTENT_TYPE = CONTENT_TYPE_LATEST
_RECONCILE_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600)
_RPC_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
CONDITIONS = ("Ready", "Reconciling", "Stalled", "RolloutHalted", "ProbePathSuspect")
"""Always exported (0 while absent), so that a condition that stops holding drops to 0."""


class Metrics:
    """Every proxyfleet_* series; thread-safe between ``record`` and a scrape."""

    content_type = CONTENT_TYPE
    """The media type of ``exposition`` (Prometheus text format)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._lock = threading.Lock()
        r = self.registry
        this = build()
        Gauge(
            "proxyfleet_build_info",
            "proxyfleet version and the git commit it was built from.",
            ["version", "commit"],
            registry=r,
        ).labels(this.version, this.commit).set(1)
        self.duration = Histogram(
            "proxyfleet_reconcile_duration_seconds",
            "Wall time of one reconcile cycle, source to status.",
            buckets=_RECONCILE_BUCKETS,
            registry=r,
        )
        self.runs = Counter(
            "proxyfleet_reconcile_runs", "Reconcile cycles by result.", ["result"], registry=r
        )
        for result in RunResult:
            self.runs.labels(result.value)
        self.last_success = Gauge(
            "proxyfleet_last_success_timestamp_seconds",
            "Unix time the last successful cycle finished (0: none yet).",
            registry=r,
        )
        self.last_run = Gauge(
            "proxyfleet_last_run_timestamp_seconds",
            "Unix time the last cycle finished, whatever its result.",
            registry=r,
        )
        self.revision = Gauge(
            "proxyfleet_source_revision_info",
            "The fleet repo revision the last cycle reconciled (value 1).",
            ["revision"],
            registry=r,
        )
        self.refused = Gauge(
            "proxyfleet_source_refused_info",
            "A head of the fleet repo the daemon refused (not a fast-forward, verifyCommits, or "
            "a host removed while it holds VMs; value 1) while it reconciles the last accepted "
            "revision; absent when none is.",
            ["revision"],
            registry=r,
        )
        self.source_up = Gauge(
            "proxyfleet_source_up",
            "1 when the last fetch of the fleet repo worked and its head was accepted.",
            registry=r,
        )
        self.condition = Gauge(
            "proxyfleet_condition",
            "Status conditions of the fleet (1 true, 0 false).",
            ["condition"],
            registry=r,
        )
        self.host_up = Gauge(
            "proxyfleet_host_up", "1 when the host could be read.", ["host", "zone"], registry=r
        )
        self.host_state = Gauge(
            "proxyfleet_host_state",
            "Each host's spec.hosts[].state: 1 for its current state (active, cordoned, "
            "draining), 0 for the others.",
            ["host", "state"],
            registry=r,
        )
        self.host_vms = Gauge(
            "proxyfleet_host_owned_vms",
            "This fleet's VMs on each host as last observed (on a draining host: those left).",
            ["host"],
            registry=r,
        )
        self.proxies = Gauge(
            "proxyfleet_proxies", "Proxies by zone and VM state.", ["zone", "state"], registry=r
        )
        self.proxy_health = Gauge(
            "proxyfleet_proxy_health",
            "Health of each proxy: 1 for its current health label.",
            ["proxy", "host", "zone", "health"],
            registry=r,
        )
        self.plan_actions = Gauge(
            "proxyfleet_plan_actions", "Actions of the last plan by kind.", ["kind"], registry=r
        )
        self.applied = Counter(
            "proxyfleet_applied_actions",
            "Actions carried out, by kind and result.",
            ["kind", "result"],
            registry=r,
        )
        self.blocked = Gauge(
            "proxyfleet_blocked_actions",
            "Actions a safety rule stopped in the last plan, by the action stopped.",
            ["action"],
            registry=r,
        )
        self.suspended = Gauge(
            "proxyfleet_suspended", "1 while spec.policy.suspend is set.", registry=r
        )
        self.rollout_halted = Gauge(
            "proxyfleet_rollout_halted",
            "1 while the rollout of the reconciled revision is halted (a new VM never got "
            "healthy); no further replace until a new commit.",
            registry=r,
        )
        self.paused_io_error = Gauge(
            "proxyfleet_vms_paused_io_error",
            "Owned VMs the hypervisor paused on an I/O error (a full pool, most often), by host.",
            ["host"],
            registry=r,
        )
        self.probe_path_suspect = Gauge(
            "proxyfleet_probe_path_suspect",
            "1 for a zone where at least half the proxies fail their probe at once "
            "(nothing is replaced for it).",
            ["zone"],
            registry=r,
        )
        self.rpc = Histogram(
            "proxyfleet_libvirt_rpc_duration_seconds",
            "Duration of libvirt calls, by call and host.",
            ["rpc", "host"],
            buckets=_RPC_BUCKETS,
            registry=r,
        )
        self.rpc_errors = Counter(
            "proxyfleet_libvirt_rpc_errors",
            "libvirt calls that failed, by call and host.",
            ["rpc", "host"],
            registry=r,
        )
        self.report_errors = Counter(
            "proxyfleet_report_errors",
            "Failures to record a run's metrics or to write its status, by stage.",
            ["stage"],
            registry=r,
        )
        for stage in ("metrics", "status"):
            self.report_errors.labels(stage)
        self.leader = Gauge(
            "proxyfleet_leader",
            "1 while this daemon holds the fleet's lock and acts; 0 while it stands by.",
            ["fleet"],
            registry=r,
        )
        self.dns_updates = Counter(
            "proxyfleet_dns_updates",
            "Runs that published the proxies' DNS names, by result (published: changes sent; "
            "unchanged: nothing to send; failed: the server was unreachable or refused).",
            ["result"],
            registry=r,
        )
        self.dns_records = Gauge(
            "proxyfleet_dns_records",
            "Names the fleet owns on the DNS server after the last successful publish.",
            registry=r,
        )
        self.dns_conflicts = Gauge(
            "proxyfleet_dns_conflicts",
            "Wanted names someone else holds (no TXT registry record of this fleet): left alone.",
            registry=r,
        )
        for condition in CONDITIONS:
            self.condition.labels(condition).set(0)
        for kind in ActionKind:
            self.plan_actions.labels(kind.value).set(0)

    def observe_rpc(self, rpc: str, host: str, seconds: float, ok: bool = True) -> None:
        """Time one libvirt call; the host adapter's ``RpcObserver`` hook (injected)."""
        self.rpc.labels(rpc, host).observe(seconds)
        if not ok:
            self.rpc_errors.labels(rpc, host).inc()

    def report_failed(self, stage: str) -> None:
        """Count a failure to record metrics (``metrics``) or to write the status (``status``)."""
        self.report_errors.labels(stage).inc()

    def leading(self, fleet: str, leading: bool) -> None:
        """``proxyfleet_leader{fleet}``: the Leadership's change hook (injected).

        A daemon that stands by drops its picture of the fleet (hosts, proxies, blocked
        actions, conditions): only the leader's is current, and a stale one would keep
        alerts such as a host being down firing on a box that no longer looks.
        """
        with self._lock:
            self.leader.labels(fleet).set(1 if leading else 0)
            if leading:
                return
            for gauge in (
                self.host_up,
                self.host_state,
                self.host_vms,
                self.proxy_health,
                self.proxies,
                self.blocked,
                self.probe_path_suspect,
                self.paused_io_error,
            ):
                gauge.clear()
            for condition in CONDITIONS:
                self.condition.labels(condition).set(0)
            self.rollout_halted.set(0)
            self.suspended.set(0)

    def source_result(self, *, ok: bool) -> None:
        self.source_up.set(1 if ok else 0)

    def record(self, report: RunReport) -> None:
        with self._lock:
            self._record(report)

    def _record(self, report: RunReport) -> None:
        finished = report.finished.timestamp()
        self.duration.observe(report.duration_seconds)
        self.runs.labels(report.result.value).inc()
        self.last_run.set(finished)
        if report.result == RunResult.SUCCESS:
            self.last_success.set(finished)
        if report.revision:
            self.revision.clear()
            self.revision.labels(report.revision).set(1)
        self.refused.clear()
        if report.refused:
            self.refused.labels(report.refused).set(1)
        present = {c.type: c.status for c in report.conditions}
        for condition in {*CONDITIONS, *present}:
            self.condition.labels(condition).set(1 if present.get(condition) else 0)
        self.suspended.set(1 if report.suspended else 0)
        if report.plan is not None:
            self.rollout_halted.set(1 if report.halts else 0)
            # Every zone and host a series, 0 when well: a recovery reads as 0, not as gone.
            suspect = set(report.plan.suspect_zones)
            self.probe_path_suspect.clear()
            for zone in suspect | {h.zone for h in report.hosts if h.zone}:
                self.probe_path_suspect.labels(zone).set(1 if zone in suspect else 0)
            self.paused_io_error.clear()
            for host in report.hosts:
                self.paused_io_error.labels(host.name).set(0)
            for ref in report.plan.paused:
                self.paused_io_error.labels(ref.host).inc()
        if report.dns is not None:
            self._record_dns(report.dns)
        for outcome in report.outcomes:
            self.applied.labels(outcome.action.kind.value, outcome.result.value).inc()
        if report.result == RunResult.STALLED or report.plan is None:
            return  # nothing was observed: keep the last picture of hosts and proxies
        self.host_up.clear()
        self.host_state.clear()
        self.host_vms.clear()
        for host in report.hosts:
            self.host_up.labels(host.name, host.zone).set(1 if host.reachable else 0)
            for each in HostState:
                self.host_state.labels(host.name, each.value).set(int(host.state is each))
            if host.reachable:
                self.host_vms.labels(host.name).set(host.owned)
        counts: dict[tuple[str, str], int] = {}
        self.proxy_health.clear()
        for proxy in report.proxies:
            key = (proxy.zone, proxy.state.value)
            counts[key] = counts.get(key, 0) + 1
            for health in Health:
                value = 1 if proxy.health == health else 0
                self.proxy_health.labels(proxy.name, proxy.host, proxy.zone, health.value).set(
                    value
                )
        self.proxies.clear()
        for (zone, state), n in sorted(counts.items()):
            self.proxies.labels(zone, state).set(n)
        for kind, n in report.plan.summary().items():
            self.plan_actions.labels(kind).set(n)
        blocked: dict[str, int] = {}
        for action in report.plan.blocked():
            name = action.blocks.value
            blocked[name] = blocked.get(name, 0) + 1
        self.blocked.clear()
        for name, n in sorted(blocked.items()):
            self.blocked.labels(name).set(n)

    def _record_dns(self, dns: DnsOutcome) -> None:
        self.dns_updates.labels(dns.result.value).inc()
        if dns.result is not DnsResult.FAILED:
            self.dns_records.set(dns.records)
            self.dns_conflicts.set(len(dns.conflicts))

    def exposition(self) -> bytes:
        """The text format, as served on /metrics."""
        with self._lock:
            return generate_latest(self.registry)

    def families(self) -> list[Metric]:
        """Every metric family now (what a scrape would read), consistent with one record."""
        with self._lock:
            return list(self.registry.collect())


class FleetMetrics(Collector):
    """The series of several fleets' ``Metrics`` as one exposition, labelled by fleet."""

    content_type = CONTENT_TYPE
    """The media type of ``exposition`` (Prometheus text format)."""

    def __init__(self, parts: Mapping[str, Metrics]) -> None:
        self._parts = dict(parts)
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def collect(self) -> Iterable[Metric]:
        merged: dict[str, Metric] = {}
        for fleet, metrics in self._parts.items():
            for family in metrics.families():
                if family.name == "proxyfleet_build_info" and family.name in merged:
                    continue
                out = merged.setdefault(
                    family.name,
                    Metric(family.name, family.documentation, family.type, family.unit),
                )
                for sample in family.samples:
                    labels = sample.labels
                    if "fleet" not in labels and family.name != "proxyfleet_build_info":
                        labels = {**labels, "fleet": fleet}
                    out.add_sample(
                        sample.name, labels, sample.value, sample.timestamp, sample.exemplar
                    )
        return list(merged.values())

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
