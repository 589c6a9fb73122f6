"""The composition root: the one place where concrete adapters meet the engine.

The engine (reconciler.engine) knows its seams only as Protocols (reconciler.ports) and
imports no adapter (an import contract says so). ``apply`` and ``plan -out``
(reconciler.cli.applyengine) and ``run``, the daemon (reconciler.cli.serve), get their
engine, and the daemon its source, status sink, listener, notifier and fleet ring, from
here: the repo loader and the image URL rule off the disk and the image cache's rules,
the history store in the state dir, the image cache, the HTTP prober, the DNS publisher.

Heavy adapters are imported inside the function that builds them, so that a command
that does not need one does not pay for importing it.
"""

from __future__ import annotations

import argparse
import dataclasses
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.adapters.coordination.fleetlock import this_process
from reconciler.adapters.hypervisor.images.imageurls import check_url
from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.adapters.surface.notify import SdNotify
from reconciler.cli.common import (
    fleet_status,
    guard_settings,
    host_factory,
    image_cache,
    read_limits,
    ssh_settings,
    state_dir,
)
from reconciler.core.load.repofiles import ReadLimits
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.engine.fencing import Fence, fenced
from reconciler.engine.leadership import fleet_id
from reconciler.engine.pool import HostFactory
from reconciler.engine.reconcile import Engine
from reconciler.engine.runtime import Runtime
from reconciler.model.settings import ApplySettings, DaemonSettings, GuardSettings
from reconciler.ports.dns import EndpointPublisher
from reconciler.ports.history import HistoryStore
from reconciler.ports.images import ImageSource
from reconciler.ports.notifier import Notifier
from reconciler.ports.prober import Prober
from reconciler.ports.repoloader import RepoLoader
from reconciler.ports.ring import FleetRing
from reconciler.ports.source import Source
from reconciler.ports.status import StatusReader, StatusSink
from reconciler.ports.surface import SurfaceFactory

if TYPE_CHECKING:
    from reconciler.adapters.hypervisor.transport.libvirtrpc import RpcObserver

load: RepoLoader = load_repo_at
"""The repo loader of every command and the engine: the fleet repo on disk, read as
untrusted input (reconciler.ports.repoloader)."""

LINE_INTERVAL = 5.0
"""Seconds between a download's progress lines, unless a bar shows them."""


def engine(
    hosts: HostFactory,
    *,
    images: ImageSource,
    prober: Prober,
    history: HistoryStore | None = None,
    settings: ApplySettings | None = None,
    runtime: Runtime | None = None,
    guards: GuardSettings | None = None,
    read_limits: ReadLimits | None = None,
    secrets: SecretAccess | None = None,
    endpoints: EndpointPublisher | None = None,
    last_status: StatusReader | None = None,
) -> Engine:
    """An engine over ``hosts``, loading repos from disk (``load``) and checking
    image URLs by the image cache's rule (``check_url``); ``history``: kept in this process
    when not given (a one-off run without a state dir, tests)."""
    from reconciler.adapters.state.historystore import MemoryHistoryStore

    return Engine(
        hosts,
        images=images,
        prober=prober,
        history=history if history is not None else MemoryHistoryStore(),
        loader=load,
        url_rule=check_url,
        settings=settings,
        runtime=runtime,
        guards=guards,
        read_limits=read_limits,
        secrets=secrets,
        endpoints=endpoints,
        last_status=last_status,
    )


def apply_engine(
    args: argparse.Namespace,
    settings: DaemonSettings,
    *,
    runtime: Runtime,
    held: Callable[[], bool] | None = None,
    fleets: bool = False,
    secrets: SecretAccess | None = None,
    progress_interval: float = LINE_INTERVAL,
) -> Engine:
    """The engine ``apply`` runs: live hosts over SSH, the local image cache, HTTP probes.

    With ``held`` (the fleet lock's), every mutating host call is fenced by it.
    ``fleets``: ``settings`` are one fleet's of a config listing several; its state dir
    (``<stateDir>/fleets/<fleet>``, under ``--state-dir`` when given) is the daemon's.
    ``progress_interval``: seconds between a download's progress events.
    """
    from reconciler.adapters.state.historystore import FileHistoryStore
    from reconciler.adapters.surface.probe import HttpProber

    if fleets:  # --state-dir and PROXYFLEET_STATE_DIR name the base, as stateDir does
        state = state_dir(args, settings.state_dir.parent.parent) / "fleets" / str(settings.fleet)
    else:
        state = state_dir(args, settings.state_dir)
    apply = ApplySettings(
        per_host_concurrency=settings.concurrency.per_host,
        delete_concurrency=settings.concurrency.deletes_per_host,
        replace_timeout=settings.replace_timeout,
    )
    if getattr(args, "no_wait", False):
        apply = dataclasses.replace(apply, ip_wait_timeout=0.0)
    hosts = host_factory(ssh_settings(args, settings.ssh), fleet=settings.fleet)
    return engine(
        fenced(hosts, held) if held is not None else hosts,
        images=image_cache(settings, state, progress_interval=progress_interval),
        prober=HttpProber(),
        settings=apply,
        runtime=runtime,
        history=FileHistoryStore(state / "history.json"),
        guards=guard_settings(settings, state),
        read_limits=read_limits(settings),
        secrets=secrets,
        last_status=fleet_status(settings),
    )


def daemon_engine(
    settings: DaemonSettings,
    observer: RpcObserver | None,
    stop: threading.Event,
    *,
    held: Fence | Callable[[], bool],
    hosts: HostFactory | None = None,
    images: ImageSource | None = None,
    prober: Prober | None = None,
    secrets: SecretAccess | None = None,
) -> Engine:
    """The daemon's engine, kept across cycles: real hosts (libvirt call timings go to
    ``observer``) unless a factory is given, each fenced by ``held`` (the fleet lock)."""
    from reconciler.adapters.dns.rfc2136 import Rfc2136Publisher
    from reconciler.adapters.hypervisor.images.download import ImageCache
    from reconciler.adapters.state.historystore import FileHistoryStore
    from reconciler.adapters.surface.probe import HttpProber

    if hosts is None:
        hosts = host_factory(settings.ssh, fleet=settings.fleet, observer=observer, watch=True)
    if images is None:
        images = ImageCache(
            settings.state_dir / "images",
            allowed_file_dirs=settings.images.allow_file_dirs,
            max_bytes=settings.images.max_bytes,
        )
    return engine(
        fenced(hosts, held),
        images=images,
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


def source(settings: DaemonSettings) -> Source:
    """The fleet repo's clone in the state dir."""
    from reconciler.adapters.git.gitsource import GitSource

    return GitSource(settings.repo, settings.state_dir / "repo")


def status_sink(settings: DaemonSettings) -> StatusSink | None:
    """The status branch's writer; None when the config turns status off."""
    from reconciler.adapters.git.statuswriter import GitStatusWriter

    if not settings.status.enabled:
        return None
    return GitStatusWriter(settings.repo, settings.status, settings.state_dir / "status")


def surface(settings: DaemonSettings) -> SurfaceFactory:
    """The HTTP endpoint on ``listen``, for the routes the daemon gives it."""
    from reconciler.adapters.surface.httpapi import HttpApi

    return lambda endpoints: HttpApi(settings.listen, endpoints)


def notifier(*, systemd: bool = True) -> Notifier:
    """systemd's sd_notify over $NOTIFY_SOCKET; ``systemd=False``: one that sends nothing
    (one fleet of several: the process notifies once, for all)."""
    return SdNotify() if systemd else SdNotify({})


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


def fleet_of(root: Path) -> str | None:
    """The fleet id of the repo on disk at ``root``; None when it does not load."""
    return fleet_id(root, load)
