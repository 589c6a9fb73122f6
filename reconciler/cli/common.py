"""What several commands share: the repo argument, host access, the state dir.

Host access (``apply``, live ``plan``, ``inventory``, ``hosts check``) comes
from, highest first: ``--ssh-key`` / ``--known-hosts``, the environment
(``PROXYFLEET_SSH_KEY``, ``PROXYFLEET_KNOWN_HOSTS``), the daemon config
(``--config FILE``, else /etc/proxyfleet/proxyfleet.yaml when it exists), and
the built-in defaults. The state dir (image cache) likewise: ``--state-dir``,
``PROXYFLEET_STATE_DIR``, the config's ``stateDir``, /var/lib/proxyfleet. The age
identity that decrypts the repo's secrets likewise: ``--age-identity``,
``PROXYFLEET_AGE_IDENTITY``, the config's ``secrets.ageIdentityFile``, none.

Only arguments, settings and messages here: what they reach (hosts, the image cache, the
locks, the repo on disk, the identity) is built by the composition root
(reconciler.cli.compose).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from reconciler.core.load.repofiles import ReadLimits
from reconciler.core.load.settings import DEFAULT_CONFIG, load_settings
from reconciler.errors import ConfigError, CoordinationError, MissingDependency
from reconciler.model.settings import DaemonSettings, GuardSettings, SshSettings
from reconciler.ports.locks import FleetLock

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
