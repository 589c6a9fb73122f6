"""What several commands share: the repo argument, host access, the state dir.

Host access (``apply``, live ``plan``, ``inventory``, ``hosts check``) comes
from, highest first: ``--ssh-key`` / ``--known-hosts``, the environment
(``PROXYFLEET_SSH_KEY``, ``PROXYFLEET_KNOWN_HOSTS``), the daemon config
(``--config FILE``, else /etc/proxyfleet/proxyfleet.yaml when it exists), and
the built-in defaults. The state dir (image cache) likewise: ``--state-dir``,
``PROXYFLEET_STATE_DIR``, the config's ``stateDir``, /var/lib/proxyfleet.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from reconciler.adapters.coordination.fleetlock import LockService, this_process
from reconciler.adapters.hypervisor.download import ImageCache
from reconciler.adapters.hypervisor.host import Hypervisor
from reconciler.core.load.manifests import load_repo
from reconciler.core.load.repofiles import ReadLimits
from reconciler.core.load.settings import DEFAULT_CONFIG, load_settings
from reconciler.engine.observe import Observation, observe, size_bases
from reconciler.engine.pool import HostPool
from reconciler.errors import ConfigError, CoordinationError, InvalidInput
from reconciler.model import Host, Repo
from reconciler.model.settings import ApplySettings, DaemonSettings, GuardSettings, SshSettings

ENV_SSH_KEY = "PROXYFLEET_SSH_KEY"
ENV_KNOWN_HOSTS = "PROXYFLEET_KNOWN_HOSTS"
ENV_STATE_DIR = "PROXYFLEET_STATE_DIR"


def add_repo_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--repo",
        type=Path,
        default=Path("."),
        metavar="DIR",
        help="the fleet repo (the directory holding fleet.yaml; default: .)",
    )


def add_host_access_arguments(parser: argparse.ArgumentParser, *, state_dir: bool = False) -> None:
    """--config, --ssh-key, --known-hosts (and --state-dir when the command caches images)."""
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f"daemon config to take SSH and state settings from (default: {DEFAULT_CONFIG} "
        "when it exists)",
    )
    parser.add_argument(
        "--ssh-key", type=Path, metavar="FILE", help=f"SSH private key (env {ENV_SSH_KEY})"
    )
    parser.add_argument(
        "--known-hosts",
        type=Path,
        metavar="FILE",
        help=f"known_hosts for the hypervisors, strictly checked (env {ENV_KNOWN_HOSTS})",
    )
    if state_dir:
        parser.add_argument(
            "--state-dir",
            type=Path,
            metavar="DIR",
            help=f"where the image cache lives (env {ENV_STATE_DIR}; default /var/lib/proxyfleet)",
        )


def daemon_settings(args: argparse.Namespace) -> DaemonSettings:
    """The config named by --config, else the default one if present, else defaults.

    Raises ConfigError when a named (or present default) config is unusable.
    """
    path: Path | None = getattr(args, "config", None)
    if path is None:
        if not DEFAULT_CONFIG.is_file():
            return DaemonSettings()
        path = DEFAULT_CONFIG
    return load_settings(path)


def fleet_settings(settings: DaemonSettings, fleet: str | None) -> DaemonSettings:
    """The settings the daemon uses for ``fleet``: its entry's of a config listing several
    fleets (fleet pin, state dir ``<stateDir>/fleets/<fleet>``), else ``settings``."""
    for one in settings.per_fleet() if settings.fleets else ():
        if one.fleet == fleet:
            return one
    return settings


def ssh_settings(args: argparse.Namespace, base: SshSettings | None = None) -> SshSettings:
    """SSH settings: flags, then environment, then ``base`` (the config's), then defaults."""
    ssh = base if base is not None else daemon_settings(args).ssh
    key = getattr(args, "ssh_key", None) or _env_path(ENV_SSH_KEY)
    known = getattr(args, "known_hosts", None) or _env_path(ENV_KNOWN_HOSTS)
    if key is not None:
        ssh = dataclasses.replace(ssh, key_file=key)
    if known is not None:
        ssh = dataclasses.replace(ssh, known_hosts_file=known)
    return ssh


def state_dir(args: argparse.Namespace, base: Path | None = None) -> Path:
    """The state dir: --state-dir, then the environment, then ``base``, then the default."""
    flag: Path | None = getattr(args, "state_dir", None)
    found = flag or _env_path(ENV_STATE_DIR) or base
    return found if found is not None else DaemonSettings().state_dir


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


def host_factory(ssh: SshSettings, *, fleet: str | None = None) -> Callable[[Host], Hypervisor]:
    """Builds a lazily dialling LibvirtHost per host (nothing connects until first use).

    ``fleet``: the pinned fleet id; a delete refuses domains of any other fleet.
    """
    from reconciler.adapters.hypervisor.libvirthost import (
        LibvirtHost,  # libvirt loads only when needed
    )

    def make(host: Host) -> Hypervisor:
        return LibvirtHost(host, ssh, fleet=fleet)

    return make


def read_limits(settings: DaemonSettings) -> ReadLimits:
    """What one load of the fleet repo may read, from the daemon config."""
    return ReadLimits(
        max_file_bytes=settings.repo.max_file_bytes, max_repo_bytes=settings.repo.max_repo_bytes
    )


def guard_settings(settings: DaemonSettings, state: Path) -> GuardSettings:
    """The engine's guards from the daemon config; deletes are recorded under ``state``."""
    return GuardSettings(
        fleet=settings.fleet,
        delete_window=settings.delete_window,
        state_file=state / "deletes.json",
        allowed_file_dirs=settings.images.allow_file_dirs,
    )


def load_repo_or_complain(root: Path) -> Repo | None:
    """The repo, or None after printing every problem to stderr."""
    try:
        return load_repo(root)
    except InvalidInput as exc:
        print(f"{root}: the fleet repo is invalid; nothing was done:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def config_error(exc: ConfigError) -> int:
    print(f"proxyfleet: the daemon config is unusable:\n{exc}", file=sys.stderr)
    return 1


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name, "").strip()
    return Path(value) if value else None


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain, left-aligned text table (no colour: it goes to logs and pipes too)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(cell)) for w, cell in zip(widths, row, strict=True)]
    lines = [
        "  ".join(cell.ljust(w) for w, cell in zip(widths, line, strict=True)).rstrip()
        for line in (headers, *rows)
    ]
    return "\n".join(lines)


def observe_live(repo: Repo, args: argparse.Namespace) -> Observation:
    """Read every host of ``repo`` over SSH now (``plan`` without ``--inventory``), and size
    the bases a host lacks as ``apply`` does (from the image cache in the state dir, or
    a HEAD request; nothing is downloaded).

    Host access as ``add_host_access_arguments`` describes; unreachable hosts
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


def image_cache(
    settings: DaemonSettings, state: Path, *, progress_interval: float = 5.0
) -> ImageCache:
    """The image cache under ``state`` (``images/``), with the config's image limits;
    ``progress_interval``: seconds between a download's progress events."""
    return ImageCache(
        state / "images",
        allowed_file_dirs=settings.images.allow_file_dirs,
        max_bytes=settings.images.max_bytes,
        progress_interval=progress_interval,
    )
