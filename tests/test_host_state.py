"""A host's ``state`` (cordoned, draining) from fleet.yaml to the status, STATUS.md and metrics.

The planner's side (placement skips such hosts, a drain replaces elsewhere) is in the
plan cases (tests/plan_cases/*cordon*, *drain*); the whole drain on real hosts in
tests/lab/test_e2e_drain.py.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from reports import report
from test_manifests import MINIMAL_FLEET, MINIMAL_PROXY, write_repo

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.adapters.surface.metrics import Metrics
from reconciler.cli import main
from reconciler.cli.status import render_status
from reconciler.core.status import statusdoc
from reconciler.core.status.statusmd import render_markdown
from reconciler.model import HostState
from reconciler.model.report import HostStatus, RunReport


def draining(owned: int, *, minute: int = 0) -> RunReport:
    """A run that saw kvm-a draining with ``owned`` VMs of the fleet, kvm-b cordoned."""
    return replace(
        report(minute=minute),
        hosts=(
            HostStatus("kvm-a", True, zone="east", owned=owned, state=HostState.DRAINING),
            HostStatus("kvm-b", True, zone="east", owned=3, state=HostState.CORDONED),
        ),
    )


def test_a_hosts_state_is_read_from_fleet_yaml_and_is_active_when_left_out(tmp_path: Path) -> None:
    two_hosts = MINIMAL_FLEET + (
        "      state: draining\n"
        "    - name: h2\n      address: 10.0.0.2\n      zone: z1\n"
        "      network: {network: default}\n"
    )
    write_repo(tmp_path, {"fleet.yaml": two_hosts, "p1.yaml": MINIMAL_PROXY})

    hosts = load_repo_at(tmp_path).fleet.hosts

    assert [(h.name, h.state, h.schedulable) for h in hosts] == [
        ("h1", HostState.DRAINING, False),
        ("h2", HostState.ACTIVE, True),
    ]


def test_a_misspelt_state_is_refused_with_file_line_field_and_the_nearest_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    misspelt = MINIMAL_FLEET + "      state: drained\n"  # line 16
    write_repo(tmp_path, {"fleet.yaml": misspelt, "p.yaml": MINIMAL_PROXY})

    assert main(["validate", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "fleet.yaml:16:14: spec.hosts[0].state: must be one of active, cordoned, draining" in err
    assert "(did you mean 'draining'?)" in err


def test_a_draining_host_reads_as_the_vms_it_has_left_then_as_empty() -> None:
    left = statusdoc.build(draining(2), None, runs=[])
    empty = statusdoc.build(draining(0, minute=5), left, runs=[])

    assert [statusdoc.host_state(h) for h in left["hosts"]] == ["draining: 2 VMs left", "cordoned"]
    assert statusdoc.host_state(empty["hosts"][0]) == "draining: empty"
    assert "| kvm-a | east | draining: empty | yes | 0 |" in render_markdown(empty)
    assert "draining: empty" in render_status(empty)
    # A document from before hosts had a state, and an unreachable draining host.
    assert statusdoc.host_state({"name": "kvm-c", "reachable": True}) == "active"
    unknown = {"state": "draining", "reachable": False, "owned": 0}
    assert statusdoc.host_state(unknown) == "draining: unknown (unreachable)"


def test_a_draining_host_getting_empty_is_named_in_the_status_commit_one_vm_less_is_not() -> None:
    three = statusdoc.build(draining(3), None, runs=[])
    two = statusdoc.build(draining(2, minute=5), three, runs=[])
    empty = statusdoc.build(draining(0, minute=10), two, runs=[])

    # The counts themselves are worth a commit (they stand as after each run) ...
    assert statusdoc.meaningful(empty) != statusdoc.meaningful(two)
    # ... but the commit's summary names the phase, not every VM fewer.
    assert not [c for c in statusdoc.changes(three, two) if c.startswith("host ")]
    assert "host kvm-a draining: empty" in statusdoc.changes(two, empty)


def test_metrics_export_each_hosts_state_and_the_vms_left_on_it() -> None:
    metrics = Metrics()
    metrics.record(draining(2))
    text = metrics.exposition().decode()
    seen = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }

    assert seen[("proxyfleet_host_state", (("host", "kvm-a"), ("state", "draining")))] == 1
    assert seen[("proxyfleet_host_state", (("host", "kvm-a"), ("state", "active")))] == 0
    assert seen[("proxyfleet_host_state", (("host", "kvm-b"), ("state", "cordoned")))] == 1
    assert seen[("proxyfleet_host_owned_vms", (("host", "kvm-a"),))] == 2
