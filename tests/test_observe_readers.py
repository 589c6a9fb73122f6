"""How many metadata readers one host's observe gets: four alone, fewer when the
process observes many hosts at once (reconciler.adapters.hypervisor.observe.hostobserve)."""

from __future__ import annotations

from contextlib import ExitStack

import pytest

from reconciler.adapters.hypervisor.observe.hostobserve import (
    OBSERVE_READS,
    READS_IN_FLIGHT,
    _Observing,
)


@pytest.mark.parametrize(
    ("hosts", "readers"),
    [(1, 4), (2, 4), (3, 2), (4, 2), (5, 1), (10, 1), (200, 1)],
)
def test_hosts_observed_at_once_share_the_reads_in_flight(hosts: int, readers: int) -> None:
    assert (OBSERVE_READS, READS_IN_FLIGHT) == (4, 8)
    observing = _Observing()
    with ExitStack() as running:
        for _ in range(hosts):
            running.enter_context(observing.one())
        assert observing.readers() == readers


def test_an_observe_that_ended_or_failed_gives_its_share_back() -> None:
    observing = _Observing()
    with observing.one():
        with pytest.raises(RuntimeError), observing.one():
            raise RuntimeError("host unreachable")
        with observing.one():
            assert observing.readers() == 4
            with observing.one():
                assert observing.readers() == 2
        assert observing.readers() == 4
    assert observing.readers() == 4
