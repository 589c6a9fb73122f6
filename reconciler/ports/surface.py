"""The surface seam: the daemon's HTTP endpoint, given the routes it answers.

Real: ``HttpApi`` (reconciler.adapters.surface.httpapi). Fake: ``FakeSurface``
(reconciler.adapters.surface.fakesurface), which listens nowhere and hands the test its
routes; tests of the routes themselves serve ``HttpApi`` on a loopback port
(tests/httpserve.py). Contract: tests/test_surface_contract.py. ``Endpoints`` is what the
routes call; the engine builds it (reconciler.engine.parts.endpoints).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Endpoints:
    """What the routes call. ``secret`` returns None when the webhook is off."""

    metrics: Callable[[], bytes]
    metrics_content_type: str
    health: Callable[[], tuple[bool, str]]
    hook: Callable[[], None]
    secret: Callable[[], bytes | None]
    targets: Callable[[], bytes] = field(default=lambda: b"[]\n")
    """GET /sd/proxies: the proxies as Prometheus ``http_sd_configs`` JSON."""


class Surface(Protocol):
    """The daemon's listener: serving from ``start`` until ``stop``."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


SurfaceFactory = Callable[[Endpoints], Surface]
"""Builds the listener for the routes the daemon answers (it owns health and the hook)."""
