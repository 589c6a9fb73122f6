from __future__ import annotations

from reports import REV1, REV2, report

from reconciler.core.status import statusdoc
from reconciler.core.status.statusmd import render_markdown
from reconciler.model.report import Health, RunResult


def doc_of(*reports: object, previous: statusdoc.Doc | None = None) -> statusdoc.Doc:
    doc = previous
    runs: list[statusdoc.Doc] = []
    for r in reports:
        runs = [statusdoc.run_entry(r), *runs]  # type: ignore[arg-type]
        doc = statusdoc.build(r, doc, runs=runs)  # type: ignore[arg-type]
    assert doc is not None
    return doc


def test_a_proxy_keeps_its_since_while_its_state_does_not_change() -> None:
    first = doc_of(report(minute=0))
    later = doc_of(report(minute=5), previous=first)
    assert later["proxies"][0]["since"] == first["proxies"][0]["since"] == "2026-11-30T12:00:04Z"


def test_a_proxy_changing_health_gets_a_new_since() -> None:
    first = doc_of(report(minute=0))
    later = doc_of(report(minute=5, health=Health.UNHEALTHY), previous=first)
    assert later["proxies"][0]["since"] == "2026-11-30T12:05:04Z"


def test_timestamps_and_history_alone_are_not_meaningful() -> None:
    first = doc_of(report(minute=0))
    later = doc_of(report(minute=5), previous=first)
    assert later["updated"] != first["updated"]
    assert statusdoc.meaningful(later) == statusdoc.meaningful(first)


def test_a_changed_health_is_meaningful_and_named_in_the_message() -> None:
    first = doc_of(report(minute=0))
    later = doc_of(report(minute=5, health=Health.UNHEALTHY), previous=first)
    assert statusdoc.meaningful(later) != statusdoc.meaningful(first)
    message = statusdoc.commit_message(first, later)
    assert "proxy web-1: health healthy -> unhealthy" in message


def test_the_first_status_names_the_created_proxy_and_the_applied_revision() -> None:
    doc = doc_of(report(created=True))
    subject = statusdoc.commit_message(None, doc).splitlines()[0]
    assert subject.startswith(f"Status of {REV1[:12]}: applied revision {REV1[:12]}")
    body = statusdoc.commit_message(None, doc)
    assert "- proxy web-1 running on kvm-a, healthy" in body


def test_a_stalled_run_keeps_the_last_applied_and_attempted_revisions() -> None:
    good = doc_of(report(revision=REV1))
    stalled = doc_of(
        report(minute=5, revision=REV2, result=RunResult.STALLED, problems=("fleet.yaml:3:1: x",)),
        previous=good,
    )
    assert stalled["observedRevision"] == REV2
    assert stalled["lastAttemptedRevision"] == REV1
    assert stalled["lastAppliedRevision"] == REV1
    assert stalled["runs"][0]["problems"] == ["fleet.yaml:3:1: x"]


def test_blocked_actions_carry_their_reason() -> None:
    doc = doc_of(report(blocked=True))
    assert doc["blocked"] == [
        {
            "action": "delete",
            "proxy": "old-1",
            "host": "kvm-b",
            "domain": "pf-f-old-1-abcdef12",
            "reason": "deletes beyond maxDeletesPerRun (1)",
        }
    ]


def test_an_unreachable_host_is_named_in_the_message() -> None:
    first = doc_of(report())
    later = doc_of(report(minute=5, reachable=False), previous=first)
    assert "host kvm-b unreachable: ssh: refused" in statusdoc.commit_message(first, later)


def test_the_yaml_round_trips_and_keeps_its_key_order() -> None:
    doc = doc_of(report(created=True, blocked=True))
    text = statusdoc.dump_yaml(doc)
    assert text.splitlines()[1] == f"apiVersion: {statusdoc.API_VERSION}"
    assert statusdoc.parse_yaml(text) == doc


def test_status_md_has_a_row_per_proxy_and_escapes_pipes() -> None:
    r = report(blocked=True)
    doc = doc_of(r)
    doc["proxies"][0]["detail"] = "probe said a|b"
    text = render_markdown(doc)
    assert "| Proxy | Zone | Host | State | IP | Health | Since | Detail |" in text
    assert "| web-1 | east | kvm-a | running | 10.0.0.5 | healthy | 2026-11-30T12:00:04Z |" in text
    assert "probe said a\\|b" in text
    assert "deletes beyond maxDeletesPerRun (1)" in text
    assert "**no**" not in text


def test_a_run_that_observed_nothing_keeps_the_last_hosts_and_proxies() -> None:
    from dataclasses import replace

    first = doc_of(report(minute=0, blocked=True))
    broken = replace(
        report(minute=5, result=RunResult.FAILED), plan=None, hosts=(), proxies=(), outcomes=()
    )
    later = doc_of(broken, previous=first)
    assert later["proxies"] == first["proxies"]
    assert later["hosts"] == first["hosts"]
    assert later["blocked"] == first["blocked"]
    assert "proxy web-1 gone" not in statusdoc.commit_message(first, later)


def test_the_idle_run_after_a_change_is_not_meaningful() -> None:
    from dataclasses import replace

    from reconciler.model.report import Condition

    def with_reconciling(r: object, reason: str) -> object:
        conds = tuple(
            Condition("Reconciling", False, reason) if c.type == "Reconciling" else c
            for c in r.conditions  # type: ignore[attr-defined]
        )
        return replace(r, conditions=conds)  # type: ignore[type-var]

    changed = doc_of(with_reconciling(report(minute=0, created=True), "Converged"))
    idle = doc_of(with_reconciling(report(minute=5), "NoChanges"), previous=changed)
    assert statusdoc.meaningful(idle) == statusdoc.meaningful(changed)


def test_a_halted_rollout_is_in_status_yaml_and_status_md_and_is_meaningful() -> None:
    from dataclasses import replace

    from reconciler.model.report import Condition

    first = doc_of(report(minute=0))
    halted = report(minute=5)
    halted = replace(
        halted,
        conditions=(
            *halted.conditions,
            Condition("RolloutHalted", True, "NewVmUnhealthy", "web-1's new VM pf-x: no IP"),
        ),
    )
    later = doc_of(halted, previous=first)

    found = {c["type"]: c for c in later["conditions"]}
    assert found["RolloutHalted"]["status"] in (True, "True")
    assert "web-1's new VM pf-x: no IP" in found["RolloutHalted"]["message"]
    assert "RolloutHalted" in render_markdown(later)
    assert "web-1's new VM pf-x: no IP" in render_markdown(later)
    assert statusdoc.meaningful(later) != statusdoc.meaningful(first)
