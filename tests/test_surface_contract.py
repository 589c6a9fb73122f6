"""One contract, two surfaces: the same cases against ``FakeSurface`` and ``HttpApi``.

``FakeSurface`` stands in for the daemon's HTTP endpoint in its unit tests, so when it
serves and what it calls by itself must be what ``HttpApi`` does. Each case runs against
both: ``HttpApi`` on 127.0.0.1 (a free port the system picks), serving meaning that a
connection to it is accepted; routes that count their calls.
"""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator
from typing import Protocol, TypeVar

import pytest

from reconciler.adapters.surface.fakesurface import FakeSurface
from reconciler.adapters.surface.httpapi import HttpApi
from reconciler.model.settings import ListenSettings
from reconciler.ports.surface import Endpoints, Surface

T = TypeVar("T")


class Side(Protocol):
    surface: Surface

    def serving(self) -> bool:
        """Whether a client reaches the surface now."""

    def scrape(self) -> tuple[str, bytes]:
        """What a scrape of /metrics gets: its content type and body."""


class Counted:
    """Routes that count the calls made to them."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.endpoints = Endpoints(
            metrics=lambda: self._call("metrics", b"runs 0\n"),
            metrics_content_type="text/plain",
            health=lambda: self._call("health", (True, "ok")),
            hook=lambda: self._call("hook", None),
            secret=lambda: self._call("secret", None),
            targets=lambda: self._call("targets", b"[]\n"),
        )

    def _call(self, name: str, value: T) -> T:
        self.calls.append(name)
        return value


class FakeSide:
    def __init__(self, endpoints: Endpoints) -> None:
        self.fake = FakeSurface(endpoints)
        self.surface: Surface = self.fake

    def serving(self) -> bool:
        return self.fake.serving

    def scrape(self) -> tuple[str, bytes]:
        assert self.fake.serving
        routes = self.fake.endpoints
        return routes.metrics_content_type, routes.metrics()


class HttpSide:
    def __init__(self, endpoints: Endpoints) -> None:
        self.api = HttpApi(ListenSettings("127.0.0.1", 0), endpoints)
        self.surface: Surface = self.api
        self.address: tuple[str, int] | None = None

    def serving(self) -> bool:
        if self.address is None:
            try:
                self.address = self.api.address
            except (AttributeError, OSError):
                return False
        with socket.socket() as client:
            client.settimeout(2)
            return client.connect_ex(self.address) == 0

    def scrape(self) -> tuple[str, bytes]:
        host, port = self.api.address
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
            return response.headers["Content-Type"], response.read()


@pytest.fixture
def routes() -> Counted:
    return Counted()


@pytest.fixture(params=["fake", "http"])
def side(request: pytest.FixtureRequest, routes: Counted) -> Iterator[Side]:
    made = FakeSide(routes.endpoints) if request.param == "fake" else HttpSide(routes.endpoints)
    try:
        yield made
    finally:
        made.surface.stop()


def test_contract_a_surface_serves_from_start_until_stop(side: Side) -> None:
    side.surface.start()
    assert side.serving()

    side.surface.stop()

    assert not side.serving()


def test_contract_a_surface_calls_none_of_its_routes_on_its_own(
    side: Side, routes: Counted
) -> None:
    side.surface.start()
    assert side.serving()
    side.surface.stop()

    assert routes.calls == []


def test_contract_a_surface_serves_the_metrics_route_it_was_built_with(
    side: Side, routes: Counted
) -> None:
    side.surface.start()

    assert side.scrape() == ("text/plain", b"runs 0\n")
    assert routes.calls == ["metrics"]
