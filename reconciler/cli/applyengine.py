"""The engine of ``apply`` and ``plan -out``, built from the command line and the daemon
config: live hosts over SSH, the local image cache, HTTP probes, the state dir's
history and delete window, so that a saved plan is computed exactly as ``apply``
computes it.

``with_engine`` runs a command's body with it: settings and logging, the age
identity, git asked for the revision while the repo loads, the fleet lock for
``apply`` (taken by the body's ``gate``), SIGINT/SIGTERM turned into "finish what
runs", and the engine and the lock closed after.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from reconciler.cli import compose
from reconciler.cli.applylock import ApplyLock, LockRefused
from reconciler.cli.common import (
    age_identity_file,
    config_error,
    daemon_settings,
    fleet_settings,
    identity_error,
    read_limits,
    state_dir,
)
from reconciler.cli.gitrevision import start_revision
from reconciler.cli.logsetup import setup_logging
from reconciler.cli.progress import show_progress_lines
from reconciler.core.load.repofiles import ReadLimits
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.engine.reconcile import Engine
from reconciler.engine.runtime import Runtime
from reconciler.errors import ConfigError, InvalidInput, MissingDependency
from reconciler.model import Repo
from reconciler.model.settings import DaemonSettings

EXIT_ERROR = 1
BAR_INTERVAL = 0.5
"""Seconds between a download's progress events when a bar shows them."""
LINE_INTERVAL = compose.LINE_INTERVAL
"""Seconds between a download's progress lines otherwise."""


@dataclass(frozen=True, slots=True)
class Started:
    """What a body gets: the engine, and what ``Engine.prepare`` wants beside the repo."""

    engine: Engine
    gate: Callable[[], None] | None
    """Takes the fleet lock (``apply``); None when the body takes none (``plan -out``)."""
    revision: Callable[[], str]
    loaded: Repo | None
    settings: DaemonSettings | None = None
    """The daemon config of the repo's fleet (its status branch, its fetch timeout)."""


def with_engine(
    args: argparse.Namespace, root: Path, body: Callable[[Started], int], *, locked: bool
) -> int:
    """``body``'s exit code, run with an engine for the repo at ``root``; ``locked``: the
    fleet lock is taken before the hosts are observed and fences every mutating call."""
    try:
        settings = daemon_settings(args)
    except ConfigError as exc:
        return config_error(exc)
    # Warnings and errors only, unless -v: the plan and the table are the output.
    setup_logging("warning", settings.log.format, verbose=getattr(args, "verbose", 0))
    show_progress_lines()
    try:
        identity = age_identity_file(args, settings.secrets.age_identity_file)
        secrets = compose.secret_access(identity, need_values=True)
    except ConfigError as exc:
        return identity_error(exc)
    stop = threading.Event()
    revision = start_revision(root)  # git answers while the repo loads
    limits = read_limits(settings)
    repo = _loaded(root, limits, secrets)
    fleet = repo.fleet.name if repo is not None else None
    lock = ApplyLock(settings, state_dir(args, settings.state_dir), fleet) if locked else None
    try:
        with _stop_on_signals(stop):
            one = fleet_settings(settings, fleet)
            if read_limits(one) != limits:  # that fleet's entry reads its repo otherwise
                repo = None
            try:
                engine = compose.apply_engine(
                    args,
                    one,
                    runtime=Runtime.interruptible(stop),
                    held=lock.held if lock is not None else None,
                    fleets=settings != one,
                    secrets=secrets,
                    progress_interval=BAR_INTERVAL if bars_wanted(args) else LINE_INTERVAL,
                )
            except MissingDependency as exc:
                return config_error(exc)
            gate = None
            if lock is not None:
                gate = functools.partial(lock.take, timeout=args.lock_timeout, stop=stop)
            try:
                return body(Started(engine, gate, revision, repo, one))
            except LockRefused:
                return EXIT_ERROR
            finally:
                engine.close()
    finally:
        if lock is not None:
            lock.close()


def bars_wanted(args: argparse.Namespace) -> bool:
    """Progress bars while applying: on a terminal, unless the output is JSON."""
    return sys.stdout.isatty() and not getattr(args, "json", False)


def _loaded(root: Path, limits: ReadLimits, secrets: SecretAccess) -> Repo | None:
    """The repo at ``root``, loaded once for the fleet's name (the lock's) and the run; None
    when it does not load (``Engine.prepare`` loads it again and reports every problem, and
    a repo that does not load is never acted on, so it needs no lock)."""
    try:
        return compose.load(root, limits=limits, secrets=secrets)
    except InvalidInput:
        return None


@contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """First SIGINT/SIGTERM: finish what runs, start nothing new. A second SIGINT aborts."""

    def first(signum: int, _frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        print(
            "\nStopping: actions in flight finish, nothing new starts (again to abort).",
            file=sys.stderr,
        )

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {s: signal.signal(s, first) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
