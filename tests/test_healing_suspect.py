"""Which zones' probe paths are suspect (half or more of their proxies failing at once)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from reconciler.core.plan.healing import suspect_zones
from reconciler.model import DomainRef
from reconciler.model.history import History, VmRecord

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
ZONE = {"zone-a": [("kvm1", "a"), ("kvm1", "b"), ("kvm2", "c"), ("kvm2", "d")]}


def failing(*vms: tuple[str, str], healthy_once: bool = True) -> History:
    record = VmRecord(failing_since=NOW - timedelta(minutes=20), healthy_once=healthy_once)
    return History(now=NOW, vms=tuple((DomainRef(h, d), record) for h, d in vms))


def test_two_of_four_proxies_failing_at_once_make_their_zone_suspect() -> None:
    suspect = suspect_zones(lambda: ZONE, failing(("kvm1", "a"), ("kvm2", "d")))

    assert list(suspect) == ["zone-a"]
    assert suspect["zone-a"].startswith("2 of 4 proxies of zone zone-a fail their probe")


def test_one_failing_vm_makes_no_zone_suspect_and_no_kept_vm_is_looked_up() -> None:
    def kept() -> dict[str, list[tuple[str, str] | None]]:
        raise AssertionError("looked up every proxy's kept VM with one VM failing")

    assert suspect_zones(kept, failing(("kvm1", "a"))) == {}
    assert suspect_zones(kept, History(now=NOW)) == {}


def test_vms_that_were_never_healthy_do_not_count_as_failing() -> None:
    history = failing(("kvm1", "a"), ("kvm2", "d"), healthy_once=False)

    assert history.failing_count() == 0
    assert suspect_zones(lambda: ZONE, history) == {}


def test_without_a_time_of_planning_nothing_counts_as_failing() -> None:
    record = VmRecord(failing_since=NOW, healthy_once=True)
    history = History(vms=((DomainRef("kvm1", "a"), record), (DomainRef("kvm2", "d"), record)))

    assert history.failing_count() == 0
    assert suspect_zones(lambda: ZONE, history) == {}
