"""One contract, two probers: the same cases against ``FakeProber`` and ``HttpProber``.

The fake stands in for the real probe in every engine unit test, so what it answers must
be what the real one answers for the same situation. Each case runs against both: the
real one probes a forward-proxy stub on 127.0.0.1 (healthy) and 127.0.0.2, where
nothing listens (no proxy); the fake is told the same with ``unhealthy``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from proxystub import serve_proxy

from reconciler.adapters.surface.probe import FakeProber, HttpProber
from reconciler.engine.check import Prober
from reconciler.model import HealthCheck

SERVING, SILENT = "127.0.0.1", "127.0.0.2"


@dataclass(frozen=True)
class Side:
    prober: Prober
    health: HealthCheck


@pytest.fixture(params=["fake", "real"])
def side(request: pytest.FixtureRequest) -> Iterator[Side]:
    with serve_proxy() as stub:
        health = HealthCheck(
            proxy_port=stub.port,
            probe_url="http://probe.invalid/generate_204",
            expect_status=204,
            timeout_seconds=2.0,
        )
        if request.param == "real":
            yield Side(HttpProber(), health)
            return
        fake = FakeProber()
        fake.unhealthy.add(SILENT)
        yield Side(fake, health)


def test_contract_a_proxy_that_relays_the_expected_status_is_healthy(side: Side) -> None:
    result = side.prober.probe(SERVING, side.health)

    assert result.healthy
    assert "HTTP 204" in result.detail


def test_contract_an_address_without_a_proxy_is_unhealthy_with_a_reason_not_an_error(
    side: Side,
) -> None:
    result = side.prober.probe(SILENT, side.health)

    assert not result.healthy
    assert result.detail


def test_contract_the_same_outcome_gives_the_same_detail_every_time(side: Side) -> None:
    # The status branch commits when a proxy's detail changes.
    first, second = (side.prober.probe(SERVING, side.health) for _ in range(2))

    assert first.detail == second.detail
