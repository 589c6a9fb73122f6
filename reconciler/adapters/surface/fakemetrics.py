"""``FakeMetrics``: the metrics seam's fake (reconciler.ports.metrics), for unit tests.

It keeps what it was given (``reports``, ``failed``) for the test to read, and serves
the two series the daemon itself feeds, runs by result and report errors by stage, in
the Prometheus text format and under the names ``Metrics`` gives them. The contract it
shares with ``Metrics``: tests/test_metrics_contract.py.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from reconciler.model.report import RunReport, RunResult

CONTENT_TYPE = "text/plain; version=1.0.0; charset=utf-8"
"""The Prometheus text format, as prometheus_client names it (``CONTENT_TYPE_LATEST``)."""
STAGES = ("metrics", "status")


@dataclass
class FakeMetrics:
    reports: list[RunReport] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    content_type: str = CONTENT_TYPE

    def record(self, report: RunReport) -> None:
        self.reports.append(report)

    def report_failed(self, stage: str) -> None:
        self.failed.append(stage)

    def exposition(self) -> bytes:
        runs = Counter(report.result.value for report in self.reports)
        errors = Counter(self.failed)
        lines = [
            "# HELP proxyfleet_reconcile_runs_total Reconcile cycles by result.",
            "# TYPE proxyfleet_reconcile_runs_total counter",
            *(
                f'proxyfleet_reconcile_runs_total{{result="{r.value}"}} {float(runs[r.value])}'
                for r in RunResult
            ),
            "# HELP proxyfleet_report_errors_total Failures to record a run's metrics or to "
            "write its status, by stage.",
            "# TYPE proxyfleet_report_errors_total counter",
            *(
                f'proxyfleet_report_errors_total{{stage="{stage}"}} {float(errors[stage])}'
                for stage in sorted({*STAGES, *errors})
            ),
        ]
        return ("\n".join(lines) + "\n").encode()
