"""``FakeSurface``: the surface seam's fake (reconciler.ports.surface), for unit tests.

It listens nowhere: it keeps the routes it was built with (``endpoints``, for the test
to call as a client would) and what was done to it (``events``). Like ``HttpApi`` it
serves from ``start`` until ``stop`` and calls none of its routes on its own. The
contract it shares with ``HttpApi``: tests/test_surface_contract.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reconciler.ports.surface import Endpoints


@dataclass
class FakeSurface:
    endpoints: Endpoints
    events: list[str] = field(default_factory=list)

    @property
    def serving(self) -> bool:
        return bool(self.events) and self.events[-1] == "start"

    def start(self) -> None:
        self.events.append("start")

    def stop(self) -> None:
        self.events.append("stop")
