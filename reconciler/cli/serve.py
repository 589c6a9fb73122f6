"""``proxyfleet run``'s work: the daemon's parts wired and served until SIGTERM.

Loaded by ``reconciler.cli.daemon`` (the command line) only when the daemon runs,
so that no other command pays for importing them."""

from __future__ import annotations

import argparse
import sys
import threading

from reconciler.cli import compose
from reconciler.cli.common import config_error
from reconciler.cli.logsetup import setup_logging
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.core.load.settings import load_settings
from reconciler.engine.control import Control
from reconciler.engine.daemon import Daemon, ObservedSource, source_cycle
from reconciler.engine.fleets import FleetsDaemon
from reconciler.engine.leadership import Leadership
from reconciler.engine.parts import DaemonParts
from reconciler.engine.pool import HostFactory
from reconciler.engine.reconcile import Engine
from reconciler.errors import ConfigError
from reconciler.model.settings import DaemonSettings
from reconciler.ports.images import ImageSource
from reconciler.ports.locks import LockService
from reconciler.ports.metrics import DaemonMetrics
from reconciler.ports.notifier import Notifier
from reconciler.ports.prober import Prober
from reconciler.ports.ring import FleetRing
from reconciler.ports.surface import Surface

SWITCH_INTERVAL = 0.001
"""Seconds a thread may hold the GIL while another waits for it (Python's default 0.005).
The listener's thread gives the GIL up at every system call and waits to get it back while
a cycle computes; behind a flood of connections, /healthz took up to 2.2 s during a
1,000-proxy cycle at 5 ms a wait, 0.6 s at 1 ms, and the cycle took as long."""


def run(args: argparse.Namespace) -> int:
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        settings = load_settings(args.config)
        # The identity is read once, at start: an unusable one stops the daemon here.
        secrets = compose.secret_access(settings.secrets.age_identity_file, need_values=True)
        locks = compose.lock_service(settings, settings.state_dir, role="daemon")
    except ConfigError as exc:
        return config_error(exc)
    setup_logging(settings.log.level, settings.log.format, verbose=getattr(args, "verbose", 0))
    return serve(settings, locks, secrets=secrets)


def serve(
    settings: DaemonSettings,
    locks: LockService,
    *,
    host_factory: HostFactory | None = None,
    images: ImageSource | None = None,
    prober: Prober | None = None,
    notifier: Notifier | None = None,
    ring: FleetRing | None = None,
    secrets: SecretAccess | None = None,
) -> int:
    """Assemble the daemon (source, lock, engine, status, metrics) and run it until SIGTERM.

    With ``fleets`` in the config, one such daemon per fleet inside a FleetsDaemon that
    spreads them over the daemons sharing the coordination service (``ring``, built
    from the config unless given). Tests run it in a process of its own with in-memory
    hosts (``host_factory``).
    """
    stop = threading.Event()
    fleets = settings.per_fleet()
    ring = ring if ring is not None or not settings.fleets else compose.fleet_ring(settings)
    parts: dict[str, tuple[Daemon, Engine, DaemonMetrics]] = {}
    try:
        for one in fleets:
            parts[one.fleet or ""] = fleet_daemon(
                one,
                locks,
                stop,
                ring=ring,
                host_factory=host_factory,
                images=images,
                prober=prober,
                notifier=None if ring is not None else notifier,
                secrets=secrets,
            )
        if ring is None:
            ((daemon, _, _),) = parts.values()
            runner: Daemon | FleetsDaemon = daemon
        else:
            runner = FleetsDaemon(
                settings,
                {fleet: daemon for fleet, (daemon, _, _) in parts.items()},
                ring=ring,
                metrics=compose.fleet_metrics({fleet: m for fleet, (_, _, m) in parts.items()}),
                surface=compose.surface(settings),
                stop=stop,
                poll=settings.coordination.poll,
                notifier=notifier if notifier is not None else compose.notifier(),
            )
    except OSError as exc:
        print(f"proxyfleet run: cannot listen on {settings.listen}: {exc}", file=sys.stderr)
        for _, engine, _ in parts.values():
            engine.close()
        locks.close()
        if ring is not None:
            ring.close()
        return 1
    controls: list[Surface] = []
    try:
        for one in fleets:
            daemon, engine, _ = parts[one.fleet or ""]
            controls.append(control_server(one, daemon, engine))
    except OSError as exc:
        print(f"proxyfleet run: cannot open the control socket: {exc}", file=sys.stderr)
        runner_http = runner.http
        if runner_http is not None:
            runner_http.stop()
        for control in controls:
            control.stop()
        for _, engine, _ in parts.values():
            engine.close()
        locks.close()
        if ring is not None:
            ring.close()
        return 1
    for control in controls:
        control.start()
    try:
        return runner.run()
    finally:
        for control in controls:
            control.stop()
        for _, engine, _ in parts.values():
            engine.close()
        locks.close()


def control_server(settings: DaemonSettings, daemon: Daemon, engine: Engine) -> Surface:
    """The root-only control socket of one fleet's daemon (``reconcile``, ``get``, ``info``)
    in its state dir (``settings``: that fleet's, ``per_fleet``). Raises OSError (another
    daemon answers there, a path in the way)."""
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    leadership = daemon.leadership
    return compose.control_server(
        settings.state_dir,
        Control(
            daemon.runs,
            reports=lambda: daemon.reports,
            role=leadership.describe if leadership is not None else (lambda: ""),
            history=engine.history.load,
            observed=lambda: engine.last_observation,
            standby=(lambda: leadership.fleet is not None and not leadership.leading)
            if leadership is not None
            else None,
        ).handle,
    )


def fleet_daemon(
    settings: DaemonSettings,
    locks: LockService,
    stop: threading.Event,
    *,
    ring: FleetRing | None,
    host_factory: HostFactory | None,
    images: ImageSource | None,
    prober: Prober | None,
    notifier: Notifier | None,
    secrets: SecretAccess | None = None,
) -> tuple[Daemon, Engine, DaemonMetrics]:
    """One fleet's daemon: its source, lock, engine, status and metrics. ``ring`` set: one
    of several fleets (no endpoint, signals or notifications of its own)."""
    metrics = compose.metrics()
    leadership = Leadership(
        locks,
        poll=settings.coordination.poll,
        on_change=metrics.leading,
        fleet=settings.fleet,
        ring=ring,
        drain=settings.ssh.call_timeout,
    )
    if ring is not None and settings.fleet is not None:
        metrics.leading(settings.fleet, False)  # exported from the start: the no-leader alert
    source = ObservedSource(compose.source(settings), metrics.source_result)
    engine = compose.daemon_engine(
        settings,
        metrics.observe_rpc,
        stop,
        held=leadership.fence,
        hosts=host_factory,
        images=images,
        prober=prober,
        secrets=secrets,
    )
    status = compose.status_sink(settings)
    cycle = source_cycle(
        source,
        lambda root, rev, *, loaded: engine.reconcile_once(root, revision=rev, loaded=loaded),
        leadership=leadership,
        fleet=settings.fleet if ring is not None else None,
        load=engine.load,
    )
    try:
        parts = DaemonParts(
            metrics=metrics,
            surface=compose.surface(settings) if ring is None else None,
            notifier=notifier if notifier is not None else compose.notifier(systemd=ring is None),
            status=status,
            leadership=leadership,
        )
        daemon = Daemon(settings, cycle, parts, runtime=engine.runtime, handle_signals=ring is None)
    except OSError:
        engine.close()
        raise
    return daemon, engine, metrics
