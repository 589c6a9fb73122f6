"""The composition root: the one place where concrete adapters are built and wired in.

The engine (reconciler.engine) knows its seams only as Protocols (reconciler.ports) and
imports no adapter; nor does any other module of the CLI (import contracts say both).
Every command gets what talks to the world from here, typed by its port or as a model
value:

- the engine: ``apply`` and ``plan -out`` (reconciler.cli.applyengine), ``run``, the
  daemon (reconciler.cli.serve): the repo loader and the image URL rule off the disk
  and the image cache's rules, the history store in the state dir, the image cache,
  the HTTP prober, the DNS publisher, the hosts;
- the repo and its secrets for every command (``load``, ``secret_access``,
  ``load_repo_or_complain``); the hosts for ``inventory``, ``plan``, ``console`` and
  ``hosts check`` (``host_factory``, ``observe_live``, ``open_console``, ``host_check``);
- git: the fleet's last status, where a checkout stands beside it (``apply``), the
  daemon's source and status sink;
- coordination: the fleet locks and the fleet ring;
- the daemon's surface: the HTTP endpoint, sd_notify, the metrics, the control socket
  (and its client, for ``reconcile``, ``get`` and ``info``).

Heavy adapters are imported inside the function that builds them, so that a command
that does not need one does not pay for importing it (libvirt, tooz, pyrage,
prometheus_client, GitPython).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from reconciler.adapters.coordination.fleetlock import this_process
from reconciler.adapters.hypervisor.images.imageurls import check_url
from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.adapters.surface import controlsocket
from reconciler.adapters.surface.notify import SdNotify
from reconciler.cli.common import (
    daemon_settings,
    guard_settings,
    read_limits,
    ssh_settings,
    state_dir,
)
from reconciler.core.load.repofiles import ReadLimits
from reconciler.core.load.secretrefs import CHECK_ONLY, SecretAccess
from reconciler.engine.fencing import Fence, fenced
from reconciler.engine.leadership import fleet_id
from reconciler.engine.observe import Observation, observe, size_bases
from reconciler.engine.pool import HostFactory, HostPool
from reconciler.engine.reconcile import Engine
from reconciler.engine.runtime import Runtime
from reconciler.errors import ConfigError, CoordinationError, InvalidInput, MissingDependency
from reconciler.model import Host, Repo
from reconciler.model.checkout import Standing
from reconciler.model.hostcheck import HostReport, Need
from reconciler.model.settings import ApplySettings, DaemonSettings, GuardSettings, SshSettings
from reconciler.ports.console import ConsoleStream
from reconciler.ports.dns import EndpointPublisher
from reconciler.ports.history import HistoryStore
from reconciler.ports.hypervisor import Hypervisor
from reconciler.ports.images import ImageSource
from reconciler.ports.locks import LockService
from reconciler.ports.metrics import DaemonMetrics, Exposition
from reconciler.ports.notifier import Notifier
from reconciler.ports.prober import Prober
from reconciler.ports.repoloader import RepoLoader
from reconciler.ports.ring import FleetRing
from reconciler.ports.source import Source
from reconciler.ports.status import StatusReader, StatusSink
from reconciler.ports.surface import Surface, SurfaceFactory

if TYPE_CHECKING:  # libvirt loads only when a host is built
    from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
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


# The repo and its secrets, for every command.


def secret_access(identity: Path | None, *, need_values: bool) -> SecretAccess:
    """How a load treats secrets with the identity file ``identity`` (None: none).

    Raises ConfigError when the identity file is unusable.
    """
    if identity is None:
        return SecretAccess(need_values=need_values)
    from reconciler.adapters.secrets.agesecrets import load_identity  # pyrage loads only here

    return SecretAccess(load_identity(identity), need_values=need_values)


def load_repo_or_complain(root: Path, secrets: SecretAccess = CHECK_ONLY) -> Repo | None:
    """The repo, or None after printing every problem to stderr."""
    try:
        return load(root, secrets=secrets)
    except InvalidInput as exc:
        print(f"{root}: the fleet repo is invalid; nothing was done:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


# Hosts and images.


def host_factory(
    ssh: SshSettings,
    *,
    fleet: str | None = None,
    observer: RpcObserver | None = None,
    watch: bool = False,
) -> HostFactory:
    """The one place a real host adapter is built: a lazily dialling LibvirtHost per host
    (nothing connects until first use), for every command and the daemon. Raises
    MissingDependency when libvirt-python is not installed.

    ``fleet``: the pinned fleet id; a delete refuses domains of any other fleet.
    ``observer``: told the duration of every libvirt call (the daemon's metrics).
    ``watch``: owners kept between observes, read again on libvirt's domain events (the
    daemon, which observes every cycle on the same connections).
    """
    return _libvirt_hosts(ssh, fleet=fleet, observer=observer, watch=watch)


def _libvirt_hosts(
    ssh: SshSettings,
    *,
    fleet: str | None = None,
    observer: RpcObserver | None = None,
    watch: bool = False,
) -> Callable[[Host], LibvirtHost]:
    try:
        from reconciler.adapters.hypervisor.libvirthost import (
            LibvirtHost,  # libvirt loads only when needed
        )
    except ModuleNotFoundError as exc:
        if exc.name != "libvirt":
            raise
        raise MissingDependency(
            "libvirt-python is not installed; commands that talk to a host need it: "
            "pip install 'proxyfleet[libvirt]' (gcc, pkg-config and libvirt-dev first), "
            "see README.md"
        ) from exc

    def make(host: Host) -> LibvirtHost:
        return LibvirtHost(host, ssh, observer=observer, fleet=fleet, watch=watch)

    return make


def image_cache(
    settings: DaemonSettings, state: Path, *, progress_interval: float = 5.0
) -> ImageSource:
    """The image cache under ``state`` (``images/``), with the config's image limits;
    ``progress_interval``: seconds between a download's progress events."""
    from reconciler.adapters.hypervisor.images.download import ImageCache

    return ImageCache(
        state / "images",
        allowed_file_dirs=settings.images.allow_file_dirs,
        max_bytes=settings.images.max_bytes,
        progress_interval=progress_interval,
    )


def observe_live(repo: Repo, args: argparse.Namespace) -> Observation:
    """Read every host of ``repo`` over SSH now (``plan`` without ``--inventory``,
    ``inventory``), and size the bases a host lacks as ``apply`` does (from the image
    cache in the state dir, or a HEAD request; nothing is downloaded).

    Host access as ``common.add_host_access_arguments`` describes; unreachable hosts
    come back as such, never as an exception.
    """
    settings = daemon_settings(args)
    pool = HostPool(host_factory(ssh_settings(args, settings.ssh)))
    try:
        hosts = pool.sync(repo.fleet.hosts)
        observation = observe(repo.fleet, hosts, timeout=ApplySettings().observe_timeout)
    finally:
        pool.close()
    images = image_cache(settings, state_dir(args, settings.state_dir))
    return size_bases(repo, observation, images)


def open_console(hypervisor: Hypervisor, domain: str, force: bool) -> ConsoleStream:
    """The serial console of ``domain`` on ``hypervisor`` (a host of ``host_factory``): a
    libvirt console stream on the host's session. Raises HostError."""
    from reconciler.adapters.hypervisor.console.libvirtconsole import open_console as opened
    from reconciler.adapters.hypervisor.libvirthost import LibvirtHost

    if not isinstance(hypervisor, LibvirtHost):
        raise TypeError(f"no libvirt session for host {hypervisor.name}")
    return opened(hypervisor.session, domain, force=force)


class HostCheck(Protocol):
    """Checks one host for ``proxyfleet hosts check``, then lets go of its connection;
    never raises HostError (what fails is in the report)."""

    def __call__(
        self,
        host: Host,
        *,
        need_uefi: bool,
        need: Need,
        kvm_probe: bool,
        say: Callable[[str], None],
    ) -> HostReport: ...


def host_check(ssh: SshSettings) -> HostCheck:
    """``hosts check``'s check of one host over ``ssh`` (LibvirtHost.host_check). Raises
    MissingDependency when libvirt-python is not installed."""
    make = _libvirt_hosts(ssh)

    def check(
        host: Host,
        *,
        need_uefi: bool,
        need: Need,
        kvm_probe: bool,
        say: Callable[[str], None],
    ) -> HostReport:
        adapter = make(host)
        try:
            return adapter.host_check(need_uefi=need_uefi, need=need, kvm_probe=kvm_probe, say=say)
        finally:
            adapter.close()

    return check


# Git: the fleet's last status, and where a checkout stands beside it.


def fleet_status(settings: DaemonSettings, *, daemon: bool = False) -> StatusReader | None:
    """Where the engine reads the fleet's last status (the removed-host guard): the status
    branch the daemon config names, fetched into the checkout with the operator's git, or
    (``daemon``) with the daemon's key and credentials; None: the daemon writes none."""
    from reconciler.adapters.git.fleetrevision import last_status
    from reconciler.adapters.git.gitsource import git_environment

    if not settings.status.enabled:
        return None
    return functools.partial(
        last_status,
        status=settings.status,
        timeout=settings.repo.fetch_timeout,
        env=git_environment(settings.repo) if daemon else None,
    )


def fleet_standing(root: Path, settings: DaemonSettings) -> Callable[[], Standing]:
    """Where the checkout at ``root`` stands beside the revision the fleet last applied (the
    status branch ``settings`` name), asked of git when called (``apply``; a fetch)."""
    from reconciler.adapters.git.fleetrevision import standing

    return functools.partial(standing, root, settings.status, timeout=settings.repo.fetch_timeout)


# Coordination.


def lock_service(settings: DaemonSettings, state: Path, *, role: str) -> LockService:
    """The fleet locks of the config's coordination service (a file lock in ``state``/locks
    by default). Raises ConfigError for a URL no backend understands."""
    from reconciler.adapters.coordination.toozlock import (  # tooz loads only here
        ToozLocks,
        default_url,
    )

    url = settings.coordination.url or default_url(state)
    try:
        return ToozLocks(url, me=this_process(role), ttl=settings.coordination.ttl)
    except CoordinationError as exc:
        raise ConfigError(f"coordination.url: {exc}") from exc


# The daemon's metrics and its control socket (and the client of that socket).


def metrics() -> DaemonMetrics:
    """One fleet's metrics (prometheus_client, a registry of its own)."""
    from reconciler.adapters.surface.metrics import Metrics  # prometheus_client loads here

    return Metrics()


def fleet_metrics(parts: Mapping[str, DaemonMetrics]) -> Exposition:
    """The metrics of several fleets (each built by ``metrics``) as one exposition,
    labelled by fleet."""
    from reconciler.adapters.surface.metrics import FleetMetrics, Metrics

    built = {fleet: part for fleet, part in parts.items() if isinstance(part, Metrics)}
    if len(built) != len(parts):
        raise TypeError("fleet_metrics serves only metrics built by compose.metrics")
    return FleetMetrics(built)


def control_server(state: Path, handler: controlsocket.Handler) -> Surface:
    """The root-only control socket in the state dir ``state``, answering with ``handler``;
    served from ``start`` until ``stop``. Binds now: raises OSError (another daemon
    answers there, a path in the way)."""
    return controlsocket.ControlServer(controlsocket.socket_path(state), handler)


def control_socket_path(state: Path) -> Path:
    """Where the daemon whose state dir is ``state`` listens for ``reconcile``, ``get``
    and ``info``."""
    return controlsocket.socket_path(state)


def control_request(
    path: Path, message: Mapping[str, Any], *, timeout: float | None
) -> Iterator[Mapping[str, Any]]:
    """The daemon's answers on the control socket at ``path`` to ``message``, as they come
    (raises ControlError)."""
    return controlsocket.request(path, message, timeout=timeout)
