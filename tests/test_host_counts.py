"""The per-host VM counts in the report (status.yaml, STATUS.md, ``get``) are those after
the run: the VMs it made and deleted count; a failed action changes nothing."""

from __future__ import annotations

from reports import NEW_VM

from reconciler.core.status.hostcounts import after_run
from reconciler.core.status.statusdoc import meaningful
from reconciler.model.plan import Action, Create, Delete, Keep
from reconciler.model.report import ActionOutcome, ActionResult, HostStatus

BEFORE = (HostStatus("kvm01", True, owned=0, foreign=1), HostStatus("kvm02", True, owned=3))


def done(action: Action, result: ActionResult = ActionResult.SUCCEEDED) -> ActionOutcome:
    return ActionOutcome(action, result)


def create(host: str, n: int) -> Create:
    return Create(reason="new VM", proxy=f"web-{n}", host=host, domain=f"pf-web-{n}", vm=NEW_VM)


def test_a_first_run_counts_the_vms_it_created_and_not_those_whose_create_failed() -> None:
    outcomes = (
        done(Keep(reason="up to date", host="kvm02")),
        *(done(create("kvm01", n)) for n in range(2)),
        done(create("kvm02", 9), ActionResult.FAILED),
    )
    after = after_run(BEFORE, outcomes)
    assert [(h.name, h.owned, h.foreign) for h in after] == [("kvm01", 2, 1), ("kvm02", 3, 0)]


def test_deletes_that_succeeded_are_gone_from_the_counts() -> None:
    outcomes = (
        done(Delete(reason="no manifest", host="kvm02", domain="pf-home-old-1-aaaaaaaa")),
        done(Delete(reason="no manifest", host="kvm02", domain="pf-home-old-2-aaaaaaaa")),
        done(Delete(reason="", host="kvm02", domain="pf-x"), ActionResult.SKIPPED),
    )
    assert [h.owned for h in after_run(BEFORE, outcomes)] == [0, 1]


def test_a_change_of_the_counts_alone_is_a_status_worth_a_commit() -> None:
    doc = {"hosts": [{"name": "kvm01", "reachable": True, "owned": 0, "foreign": 0}]}
    more = {"hosts": [{"name": "kvm01", "reachable": True, "owned": 2, "foreign": 0}]}
    assert meaningful(doc) != meaningful(more)
