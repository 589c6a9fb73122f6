"""What the daemon is made of besides its cycle: small seams, wired by the CLI, faked by tests.

``Daemon`` takes a ``DaemonParts``: the metrics sink, the HTTP surface (built
from the routes the daemon answers), the service manager notifier, the status
sink (their seams: reconciler.ports.metrics, .surface, .notifier, .status) and the
fleet's leadership; the composition root (reconciler.cli.compose) builds the real
ones. Time, chance, the stop flag and the engine's progress come through ``Runtime``. ``endpoints``,
``start_watchdog`` and ``webhook_secret`` serve a ``Daemon`` and a
``FleetsDaemon`` (several fleets, one process) alike.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from reconciler.engine.leadership import Leadership
from reconciler.engine.triggers import TriggerQueue
from reconciler.model.settings import DaemonSettings
from reconciler.ports.metrics import Exposition, MetricsSink
from reconciler.ports.notifier import Notifier
from reconciler.ports.status import StatusSink
from reconciler.ports.surface import Endpoints, SurfaceFactory

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class DaemonParts:
    metrics: MetricsSink
    surface: SurfaceFactory | None
    """None: no listener of its own (one fleet of several: the FleetsDaemon serves)."""
    notifier: Notifier
    status: StatusSink | None = None
    """None: the status is not written back."""
    leadership: Leadership | None = None
    """Who acts for the fleet; None: this daemon always acts (no lock, tests)."""


def endpoints(
    settings: DaemonSettings,
    metrics: Exposition,
    *,
    health: Callable[[], tuple[bool, str]],
    triggers: TriggerQueue,
    targets: Callable[[], list[dict[str, Any]]] = list,
) -> Endpoints:
    """The routes a daemon answers: /metrics, /healthz, /sd/proxies (``targets``, as
    JSON) and the webhook, which fires ``triggers``."""
    return Endpoints(
        metrics=metrics.exposition,
        metrics_content_type=metrics.content_type,
        health=health,
        hook=lambda: triggers.fire("webhook"),
        secret=lambda: webhook_secret(settings),
        targets=lambda: json.dumps(targets(), indent=1).encode() + b"\n",
    )


def start_watchdog(
    notifier: Notifier, stop: threading.Event, alive: Callable[[], bool]
) -> threading.Thread | None:
    """Ping systemd's watchdog while ``alive()`` (when the unit has one) until ``stop``."""
    interval = notifier.watchdog_interval
    if interval is None:
        return None

    def ping() -> None:
        while not stop.wait(interval):
            if alive():
                notifier.watchdog()
            else:
                log.error("A reconcile cycle looks hung; no longer pinging the watchdog.")

    notifier.watchdog()
    thread = threading.Thread(target=ping, name="watchdog", daemon=True)
    thread.start()
    return thread


def webhook_secret(settings: DaemonSettings) -> bytes | None:
    """The webhook's shared secret, read on every request (rotating it needs no restart);
    None: no webhook; b"" (refuse every hook): the file is unreadable."""
    path = settings.webhook.secret_file
    if path is None:
        return None
    try:
        return path.read_bytes().strip()
    except OSError as exc:
        log.error("Webhook secret %s unreadable: %s; refusing every hook.", path, exc.strerror)
        return b""
