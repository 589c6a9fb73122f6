"""What several commands share: the repo argument, host access, the state dir.

Host access (``apply``, live ``plan``, ``inventory``, ``hosts check``) comes
from, highest first: ``--ssh-key`` / ``--known-hosts``, the environment
(``PROXYFLEET_SSH_KEY``, ``PROXYFLEET_KNOWN_HOSTS``), the daemon config
(``--config FILE``, else /etc/proxyfleet/proxyfleet.yaml when it exists), and
the built-in defaults. The state dir (image cache) likewise: ``--state-dir``,
``PROXYFLEET_STATE_DIR``, the config's ``stateDir``, /var/lib/proxyfleet. The age
identity that decrypts the repo's secrets likewise: ``--age-identity``,
``PROXYFLEET_AGE_IDENTITY``, the config's ``secrets.ageIdentityFile``, none.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from reconciler.adapters.coordination.fleetlock import this_process
from reconciler.adapters.hypervisor.images.download import ImageCache
from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.core.load.repofiles import ReadLimits
from reconciler.core.load.secretrefs import CHECK_ONLY, SecretAccess
from reconciler.core.load.settings import DEFAULT_CONFIG, load_settings
from reconciler.engine.observe import Observation, observe, size_bases
from reconciler.engine.pool import HostPool
from reconciler.errors import ConfigError, CoordinationError, InvalidInput, MissingDependency
from reconciler.model import Host, Repo
from reconciler.model.settings import ApplySettings, DaemonSettings, GuardSettings, SshSettings
from reconciler.ports.locks import FleetLock, LockService

if TYPE_CHECKING:  # libvirt loads only when a host is built
    from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
    from reconciler.adapters.hypervisor.transport.libvirtrpc import RpcObserver
    from reconciler.ports.status import StatusReader

ENV_SSH_KEY = "PROXYFLEET_SSH_KEY"
ENV_KNOWN_HOSTS = "PROXYFLEET_KNOWN_HOSTS"
ENV_STATE_DIR = "PROXYFLEET_STATE_DIR"
ENV_AGE_IDENTITY = "PROXYFLEET_AGE_IDENTITY"


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


def add_age_identity_argument(parser: argparse.ArgumentParser, *, config: bool = True) -> None:
    """--age-identity; ``config``: the daemon config's identity is the default."""
    default = "the config's secrets.ageIdentityFile" if config else "none"
    parser.add_argument(
        "--age-identity",
        type=Path,
        metavar="FILE",
        help="age identity file that decrypts the repo's secrets/NAME.age "
        f"(env {ENV_AGE_IDENTITY}; default: {default})",
    )


def age_identity_file(args: argparse.Namespace, base: Path | None = None) -> Path | None:
    """--age-identity, then the environment, then ``base`` (the config's), else None."""
    flag: Path | None = getattr(args, "age_identity", None)
    return flag or _env_path(ENV_AGE_IDENTITY) or base


def configured_identity(args: argparse.Namespace) -> Path | None:
    """The identity file for ``plan``: flag, environment, else the daemon config's (read only
    then, so that a plan with --age-identity never depends on /etc). Raises ConfigError."""
    found = age_identity_file(args)
    return found if found is not None else daemon_settings(args).secrets.age_identity_file


def secret_access(identity: Path | None, *, need_values: bool) -> SecretAccess:
    """How a load treats secrets with the identity file ``identity`` (None: none).

    Raises ConfigError when the identity file is unusable.
    """
    if identity is None:
        return SecretAccess(need_values=need_values)
    from reconciler.adapters.secrets.agesecrets import load_identity  # pyrage loads only here

    return SecretAccess(load_identity(identity), need_values=need_values)


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


def host_factory(
    ssh: SshSettings,
    *,
    fleet: str | None = None,
    observer: RpcObserver | None = None,
    watch: bool = False,
) -> Callable[[Host], LibvirtHost]:
    """The one place a real host adapter is built: a lazily dialling LibvirtHost per host
    (nothing connects until first use), for every command and the daemon.

    ``fleet``: the pinned fleet id; a delete refuses domains of any other fleet.
    ``observer``: told the duration of every libvirt call (the daemon's metrics).
    ``watch``: owners kept between observes, read again on libvirt's domain events (the
    daemon, which observes every cycle on the same connections).
    """
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
        max_deletes=settings.max_deletes_per_run,
        allowed_file_dirs=settings.images.allow_file_dirs,
    )


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


def load_repo_or_complain(root: Path, secrets: SecretAccess = CHECK_ONLY) -> Repo | None:
    """The repo, or None after printing every problem to stderr."""
    try:
        return load_repo_at(root, secrets=secrets)
    except InvalidInput as exc:
        print(f"{root}: the fleet repo is invalid; nothing was done:", file=sys.stderr)
        for problem in exc.problems:
            print(f"  {problem}", file=sys.stderr)
        return None


def identity_error(exc: ConfigError) -> int:
    print(f"proxyfleet: the age identity is unusable; nothing was done:\n{exc}", file=sys.stderr)
    return 1


def config_error(exc: ConfigError) -> int:
    if isinstance(exc, MissingDependency):
        print(f"proxyfleet: {exc}", file=sys.stderr)
    else:
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


def take_lock(lock: FleetLock, *, timeout: float, stop: threading.Event) -> bool:
    """Take the fleet's lock for this apply, or say who has it; True once it is ours.

    ``timeout``: seconds to wait for a held lock (0: refuse at once, ``math.inf``: until
    it is free or ``stop`` is set)."""
    try:
        if lock.acquire():
            return True
        holder = lock.holder()
        who = str(holder) if holder is not None else "another actor (unknown)"
        if timeout <= 0:
            print(
                f"proxyfleet apply: fleet {lock.fleet} is locked by {who}; nothing was applied. "
                "Pass --lock-timeout 10m (or forever) to wait for the lock, or stop that "
                "actor first.",
                file=sys.stderr,
            )
            return False
        until = "" if math.isinf(timeout) else f" up to {timeout:g} s"
        print(
            f"Waiting{until} for the lock of fleet {lock.fleet}, held by {who} ...",
            file=sys.stderr,
        )
        if lock.acquire(wait=timeout, stop=stop):
            return True
        why = "stopped while waiting" if stop.is_set() else f"still locked by {who} after the wait"
        print(f"proxyfleet apply: {why}; nothing was applied.", file=sys.stderr)
        return False
    except CoordinationError as exc:
        print(
            f"proxyfleet apply: cannot take the lock of fleet {lock.fleet}: {exc}; "
            "nothing was applied.",
            file=sys.stderr,
        )
        return False
