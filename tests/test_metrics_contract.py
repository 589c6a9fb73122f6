"""One contract, two metrics sinks: the same cases against ``FakeMetrics`` and ``Metrics``.

``FakeMetrics`` stands in for the Prometheus metrics in the daemon's unit tests, so what
it serves on /metrics for what it was given must be what ``Metrics`` serves: the same
media type, the Prometheus text format, the same series for the runs the daemon records
and the reports it fails to write. Each case feeds both the same calls and reads their
expositions back with prometheus_client's own parser.
"""

from __future__ import annotations

import pytest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.parser import text_string_to_metric_families
from reports import report

from reconciler.adapters.surface.fakemetrics import FakeMetrics
from reconciler.adapters.surface.metrics import Metrics
from reconciler.model.report import RunResult
from reconciler.ports.metrics import MetricsSink

RUNS = "proxyfleet_reconcile_runs_total"
ERRORS = "proxyfleet_report_errors_total"


@pytest.fixture(params=["fake", "prometheus"])
def sink(request: pytest.FixtureRequest) -> MetricsSink:
    return FakeMetrics() if request.param == "fake" else Metrics()


def samples(sink: MetricsSink, name: str) -> dict[str, float]:
    """``name``'s samples in the exposition, by their one label's value."""
    text = sink.exposition().decode()
    return {
        next(iter(sample.labels.values())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name
    }


def test_contract_the_exposition_is_the_prometheus_text_format_it_says_it_is(
    sink: MetricsSink,
) -> None:
    assert sink.content_type == CONTENT_TYPE_LATEST
    assert isinstance(sink.exposition(), bytes)
    assert list(text_string_to_metric_families(sink.exposition().decode()))


def test_contract_every_result_and_stage_is_served_at_zero_before_anything_happens(
    sink: MetricsSink,
) -> None:
    assert samples(sink, RUNS) == {result.value: 0.0 for result in RunResult}
    assert samples(sink, ERRORS) == {"metrics": 0.0, "status": 0.0}


def test_contract_each_recorded_run_is_counted_under_its_result(sink: MetricsSink) -> None:
    for result in (RunResult.SUCCESS, RunResult.PARTIAL, RunResult.SUCCESS):
        sink.record(report(result=result))

    assert samples(sink, RUNS) == {"success": 2.0, "partial": 1.0, "stalled": 0.0, "failed": 0.0}


def test_contract_a_report_that_failed_is_counted_under_its_stage(sink: MetricsSink) -> None:
    sink.report_failed("status")
    sink.report_failed("status")
    sink.report_failed("metrics")

    assert samples(sink, ERRORS) == {"metrics": 1.0, "status": 2.0}
