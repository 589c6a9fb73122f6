"""``proxyfleet run``: the daemon (systemd's proxyfleet.service runs this)."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path
from typing import Any

from reconciler.adapters.gitsource import GitSource
from reconciler.adapters.host import Hypervisor
from reconciler.adapters.metrics import Metrics
from reconciler.adapters.notify import SdNotify
from reconciler.adapters.statuswriter import GitStatusWriter
from reconciler.cli.common import config_error, guard_settings, read_limits
from reconciler.cli.logsetup import setup_logging
from reconciler.core.settings import DEFAULT_CONFIG, load_settings
from reconciler.engine.check import Prober
from reconciler.engine.daemon import Daemon, ObservedSource, source_cycle
from reconciler.engine.executor import ImageSource
from reconciler.engine.reconcile import Engine
from reconciler.engine.runtime import Runtime
from reconciler.errors import ConfigError
from reconciler.model import Host
from reconciler.model.settings import ApplySettings, DaemonSettings


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "run",
        help="the daemon: reconcile on every commit, webhook, SIGHUP and interval",
        description="Run the reconcile daemon: pull the fleet repo, reconcile, report "
        "(metrics, status branch, systemd notifications) until SIGTERM.",
    )
    parser.add_argument(
        "--config",
        type=Path,
        default=DEFAULT_CONFIG,
        metavar="FILE",
        help=f"daemon config (default: {DEFAULT_CONFIG})",
    )
    parser.set_defaults(func=run)


def build_engine(settings: DaemonSettings, metrics: Metrics, stop: threading.Event) -> Engine:
    """The engine on real hosts, kept across cycles; libvirt call timings go to ``metrics``."""
    from reconciler.adapters.download import ImageCache
    from reconciler.adapters.historystore import FileHistoryStore
    from reconciler.adapters.libvirthost import LibvirtHost  # libvirt loads only here
    from reconciler.adapters.probe import HttpProber

    def make_host(host: Host) -> Hypervisor:
        return LibvirtHost(host, settings.ssh, observer=metrics.observe_rpc, fleet=settings.fleet)

    images: ImageSource = ImageCache(
        settings.state_dir / "images",
        allowed_file_dirs=settings.images.allow_file_dirs,
        max_bytes=settings.images.max_bytes,
    )
    prober: Prober = HttpProber()
    return Engine(
        make_host,
        images=images,
        prober=prober,
        settings=ApplySettings(per_host_concurrency=settings.concurrency.per_host),
        runtime=Runtime.interruptible(stop),
        history=FileHistoryStore(settings.state_dir / "history.json"),
        guards=guard_settings(settings, settings.state_dir),
        read_limits=read_limits(settings),
    )


def run(args: argparse.Namespace) -> int:
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        return config_error(exc)
    setup_logging(settings.log.level, settings.log.format, verbose=getattr(args, "verbose", 0))
    metrics = Metrics()
    stop = threading.Event()
    source = ObservedSource(
        GitSource(settings.repo, settings.state_dir / "repo"), metrics.source_result
    )
    engine = build_engine(settings, metrics, stop)
    status = (
        GitStatusWriter(settings.repo, settings.status, settings.state_dir / "status")
        if settings.status.enabled
        else None
    )
    try:
        daemon = Daemon(
            settings,
            source_cycle(source, lambda root, rev: engine.reconcile_once(root, revision=rev)),
            metrics=metrics,
            status=status,
            notifier=SdNotify(),
            stop=stop,
            progress=engine.runtime.progress,
        )
    except OSError as exc:
        print(f"proxyfleet run: cannot listen on {settings.listen}: {exc}", file=sys.stderr)
        engine.close()
        return 1
    try:
        return daemon.run()
    finally:
        engine.close()
