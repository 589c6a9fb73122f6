"""``proxyfleet run``'s work: the daemon's parts wired and served until SIGTERM.

Loaded by ``reconciler.cli.daemon`` (the command line) only when the daemon runs,
so that no other command pays for importing them."""

from __future__ import annotations

import argparse
import socket
import sys
import threading
from collections.abc import Callable

from reconciler.adapters.coordination.fleetlock import LockService, this_process
from reconciler.adapters.coordination.fleetring import FleetRing
from reconciler.adapters.git.gitsource import GitSource
from reconciler.adapters.git.statuswriter import GitStatusWriter
from reconciler.adapters.surface.controlsocket import ControlServer, socket_path
from reconciler.adapters.surface.httpapi import HttpApi
from reconciler.adapters.surface.metrics import FleetMetrics, Metrics
from reconciler.adapters.surface.notify import SdNotify
from reconciler.cli.common import (
    config_error,
    fleet_status,
    guard_settings,
    lock_service,
    read_limits,
    secret_access,
)
from reconciler.cli.common import host_factory as real_hosts
from reconciler.cli.logsetup import setup_logging
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.core.load.settings import load_settings
from reconciler.engine.check import Prober
from reconciler.engine.control import Control
from reconciler.engine.daemon import Daemon, ObservedSource, source_cycle
from reconciler.engine.executor import ImageSource
from reconciler.engine.fencing import Fence, fenced
from reconciler.engine.fleets import FleetsDaemon
from reconciler.engine.leadership import Leadership
from reconciler.engine.parts import DaemonParts
from reconciler.engine.pool import HostFactory
from reconciler.engine.reconcile import Engine
from reconciler.engine.runtime import Runtime
from reconciler.errors import ConfigError
from reconciler.model.settings import ApplySettings, DaemonSettings


def build_engine(
    settings: DaemonSettings,
    metrics: Metrics,
    stop: threading.Event,
    *,
    held: Fence | Callable[[], bool],
    host_factory: HostFactory | None = None,
    images: ImageSource | None = None,
    prober: Prober | None = None,
    secrets: SecretAccess | None = None,
) -> Engine:
    """The engine, kept across cycles: real hosts (libvirt call timings go to ``metrics``)
    unless a factory is given, each fenced by ``held`` (the fleet lock)."""
    from reconciler.adapters.dns.rfc2136 import Rfc2136Publisher
    from reconciler.adapters.hypervisor.images.download import ImageCache
    from reconciler.adapters.state.historystore import FileHistoryStore
    from reconciler.adapters.surface.probe import HttpProber

    if host_factory is None:
        host_factory = real_hosts(
            settings.ssh, fleet=settings.fleet, observer=metrics.observe_rpc, watch=True
        )
    return Engine(
        fenced(host_factory, held),
        images=images
        if images is not None
        else ImageCache(
            settings.state_dir / "images",
            allowed_file_dirs=settings.images.allow_file_dirs,
            max_bytes=settings.images.max_bytes,
        ),
        prober=prober if prober is not None else HttpProber(),
        settings=ApplySettings(
            per_host_concurrency=settings.concurrency.per_host,
            delete_concurrency=settings.concurrency.deletes_per_host,
            replace_timeout=settings.replace_timeout,
            ip_wait_timeout=0.0,  # a run never waits for a boot: follow-up runs look again
        ),
        runtime=Runtime.interruptible(stop),
        history=FileHistoryStore(settings.state_dir / "history.json"),
        guards=guard_settings(settings, settings.state_dir),
        read_limits=read_limits(settings),
        secrets=secrets,
        endpoints=Rfc2136Publisher(settings.dns) if settings.dns is not None else None,
        last_status=fleet_status(settings, daemon=True),
    )


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
        secrets = secret_access(settings.secrets.age_identity_file, need_values=True)
        locks = lock_service(settings, settings.state_dir, role="daemon")
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
    notifier: SdNotify | None = None,
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
    ring = ring if ring is not None or not settings.fleets else fleet_ring(settings)
    parts: dict[str, tuple[Daemon, Engine, Metrics]] = {}
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
                metrics=FleetMetrics({fleet: m for fleet, (_, _, m) in parts.items()}),
                surface=lambda endpoints: HttpApi(settings.listen, endpoints),
                stop=stop,
                poll=settings.coordination.poll,
                notifier=notifier if notifier is not None else SdNotify(),
            )
    except OSError as exc:
        print(f"proxyfleet run: cannot listen on {settings.listen}: {exc}", file=sys.stderr)
        for _, engine, _ in parts.values():
            engine.close()
        locks.close()
        if ring is not None:
            ring.close()
        return 1
    controls: list[ControlServer] = []
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


def control_server(settings: DaemonSettings, daemon: Daemon, engine: Engine) -> ControlServer:
    """The root-only control socket of one fleet's daemon (``reconcile``, ``get``, ``info``)
    in its state dir (``settings``: that fleet's, ``per_fleet``). Raises OSError (another
    daemon answers there, a path in the way)."""
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    leadership = daemon.leadership
    return ControlServer(
        socket_path(settings.state_dir),
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


def fleet_ring(settings: DaemonSettings) -> FleetRing:
    """The ring of the config's coordination service over the fleets it lists."""
    from reconciler.adapters.coordination.toozlock import default_url
    from reconciler.adapters.coordination.toozring import ToozRing  # tooz loads only here

    coordination = settings.coordination
    return ToozRing(
        coordination.url or default_url(settings.state_dir),
        member=coordination.member or socket.gethostname(),
        fleets=[entry.fleet for entry in settings.fleets],
        me=this_process("daemon"),
        ttl=coordination.ttl,
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
    notifier: SdNotify | None,
    secrets: SecretAccess | None = None,
) -> tuple[Daemon, Engine, Metrics]:
    """One fleet's daemon: its source, lock, engine, status and metrics. ``ring`` set: one
    of several fleets (no endpoint, signals or notifications of its own)."""
    metrics = Metrics()
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
    source = ObservedSource(
        GitSource(settings.repo, settings.state_dir / "repo"), metrics.source_result
    )
    engine = build_engine(
        settings,
        metrics,
        stop,
        held=leadership.fence,
        host_factory=host_factory,
        images=images,
        prober=prober,
        secrets=secrets,
    )
    status = (
        GitStatusWriter(settings.repo, settings.status, settings.state_dir / "status")
        if settings.status.enabled
        else None
    )
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
            surface=(lambda endpoints: HttpApi(settings.listen, endpoints))
            if ring is None
            else None,
            notifier=notifier
            if notifier is not None
            else (SdNotify() if ring is None else SdNotify({})),
            status=status,
            leadership=leadership,
        )
        daemon = Daemon(settings, cycle, parts, runtime=engine.runtime, handle_signals=ring is None)
    except OSError:
        engine.close()
        raise
    return daemon, engine, metrics
