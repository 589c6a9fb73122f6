"""proxyfleet_dns_*: what publishing the proxies' names did, run after run."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client.parser import text_string_to_metric_families
from reports import report

from reconciler.adapters.surface.metrics import Metrics
from reconciler.model.report import DnsOutcome, DnsResult


def value(metrics: Metrics, name: str, **labels: str) -> float | None:
    text = metrics.exposition().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def test_updates_are_counted_by_result_and_a_failure_keeps_the_last_record_count() -> None:
    metrics = Metrics()
    published = DnsOutcome(DnsResult.PUBLISHED, records=7, changes=7, conflicts=("web-9: x",))

    metrics.record(replace(report(minute=0), dns=published))
    metrics.record(replace(report(minute=5), dns=DnsOutcome(DnsResult.FAILED, rcode="REFUSED")))

    assert value(metrics, "proxyfleet_dns_updates_total", result="published") == 1
    assert value(metrics, "proxyfleet_dns_updates_total", result="failed") == 1
    assert value(metrics, "proxyfleet_dns_records") == 7
    assert value(metrics, "proxyfleet_dns_conflicts") == 1
