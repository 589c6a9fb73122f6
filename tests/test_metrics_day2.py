"""The day-2 series: a halted rollout and a suspect probe path, set and cleared."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

from prometheus_client.parser import text_string_to_metric_families
from reports import report

from reconciler.adapters.surface.metrics import Metrics
from reconciler.model import DomainRef, Plan
from reconciler.model.history import Halt
from reconciler.model.report import Condition


def samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


HALT = Halt("r1", "web-1", "pf-x", "no IP", datetime(2026, 12, 1, tzinfo=UTC))


def test_a_halted_rollout_and_a_suspect_zone_are_exported_and_go_to_0_in_the_next_run() -> None:
    metrics = Metrics()
    bad = report(minute=0)
    assert bad.plan is not None
    bad = replace(
        bad,
        halts=(HALT,),
        plan=replace(
            bad.plan,
            suspect_zones=("east",),
            paused=(DomainRef("kvm01", "pf-a"), DomainRef("kvm01", "pf-b")),
        ),
        conditions=(*bad.conditions, Condition("RolloutHalted", True, "NewVmUnhealthy")),
    )

    metrics.record(bad)
    seen = samples(metrics)

    assert seen[("proxyfleet_rollout_halted", ())] == 1
    assert seen[("proxyfleet_probe_path_suspect", (("zone", "east"),))] == 1
    assert seen[("proxyfleet_condition", (("condition", "RolloutHalted"),))] == 1
    assert seen[("proxyfleet_vms_paused_io_error", (("host", "kvm01"),))] == 2

    metrics.record(replace(report(minute=5), plan=Plan()))
    seen = samples(metrics)

    assert seen[("proxyfleet_rollout_halted", ())] == 0
    # A recovered zone reads 0, not gone (an alert's `== 1` ends; a graph shows the fall).
    assert seen[("proxyfleet_probe_path_suspect", (("zone", "east"),))] == 0
    assert seen[("proxyfleet_probe_path_suspect", (("zone", "west"),))] == 0
    assert seen[("proxyfleet_vms_paused_io_error", (("host", "kvm-a"),))] == 0
    assert ("proxyfleet_vms_paused_io_error", (("host", "kvm01"),)) not in seen  # not in fleet
    assert seen[("proxyfleet_condition", (("condition", "RolloutHalted"),))] == 0


def test_the_metrics_of_several_fleets_are_served_as_one_labelled_by_fleet() -> None:
    from reconciler.adapters.surface.metrics import FleetMetrics, Metrics

    home, lab = Metrics(), Metrics()
    home.leading("home", True)
    lab.leading("lab", False)
    home.source_result(ok=True)

    text = FleetMetrics({"home": home, "lab": lab}).exposition().decode()

    assert 'proxyfleet_leader{fleet="home"} 1.0' in text
    assert 'proxyfleet_leader{fleet="lab"} 0.0' in text
    assert 'proxyfleet_source_up{fleet="home"} 1.0' in text
    assert 'proxyfleet_condition{condition="Ready",fleet="lab"} 0.0' in text
    assert text.count("# TYPE proxyfleet_source_up gauge") == 1
    assert text.count("proxyfleet_build_info{") == 1
