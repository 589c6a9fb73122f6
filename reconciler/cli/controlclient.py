"""What ``reconcile``, ``get`` and ``info`` share: finding and asking the running daemon.

The daemon's control socket is ``<stateDir>/control.sock`` (root only); a daemon
whose config lists ``fleets`` has one per fleet, ``<stateDir>/fleets/<fleet>/control.sock``,
chosen with ``--fleet``. The state dir comes from, highest first: ``--socket PATH``
itself, ``--state-dir``, the environment (``PROXYFLEET_STATE_DIR``), the daemon config
(``--config FILE``, else /etc/proxyfleet/proxyfleet.yaml when it exists),
/var/lib/proxyfleet.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from reconciler.cli import compose, exitcodes
from reconciler.cli.common import ENV_STATE_DIR, daemon_settings, state_dir
from reconciler.core.load import durations
from reconciler.core.load.settings import DEFAULT_CONFIG
from reconciler.errors import ConfigError
from reconciler.model.settings import fleet_state_dir

EXIT_OK = exitcodes.OK
EXIT_ERROR = exitcodes.ERROR
"""The daemon could not be asked (none runs, refused, no answer in time) or said no."""
EXIT_STANDBY = exitcodes.STANDBY
"""The daemon stands by: another one leads the fleet (named in the message)."""


def add_socket_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--socket",
        type=Path,
        metavar="PATH",
        help="the daemon's control socket (default: <stateDir>/control.sock)",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help=f"daemon config to take stateDir from (default: {DEFAULT_CONFIG} when it exists)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help=f"the daemon's state dir (env {ENV_STATE_DIR}; default /var/lib/proxyfleet)",
    )
    parser.add_argument(
        "--fleet",
        metavar="NAME",
        help="the fleet to ask, when the daemon's config lists several (its fleets: id)",
    )


def duration(text: str) -> float:
    """An argparse type: ``90``, ``30s``, ``5m``, ``1h``."""
    try:
        value = durations.from_text(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0: {text}")
    return value


def socket_of(args: argparse.Namespace) -> Path:
    """Raises ConfigError when a named (or present default) config is unusable."""
    if args.socket is not None:
        return Path(args.socket)
    base = None
    fleets: tuple[str, ...] = ()
    if args.config is not None or DEFAULT_CONFIG.is_file():
        settings = daemon_settings(args)
        base = settings.state_dir
        fleets = tuple(entry.fleet for entry in settings.fleets)
    state = state_dir(args, base)
    fleet: str | None = args.fleet
    if fleet is None:
        fleets = fleets or _fleet_sockets(state)
        if fleets:
            raise ConfigError(
                f"the daemon serves several fleets ({', '.join(fleets)}); name one with --fleet"
            )
        return compose.control_socket_path(state)
    if fleets and fleet not in fleets:
        raise ConfigError(f"--fleet {fleet}: the daemon's config lists {', '.join(fleets)}")
    return compose.control_socket_path(fleet_state_dir(state, fleet))


def _fleet_sockets(state: Path) -> tuple[str, ...]:
    """The fleets with a control socket under ``state`` when it has none of its own: the
    state dir of a daemon of several fleets, asked without its config."""
    if compose.control_socket_path(state).exists() or not (state / "fleets").is_dir():
        return ()
    return tuple(
        sorted(
            d.name for d in (state / "fleets").iterdir() if compose.control_socket_path(d).exists()
        )
    )


def ask(
    args: argparse.Namespace, message: Mapping[str, Any], *, timeout: float | None
) -> Iterator[Mapping[str, Any]]:
    """The daemon's answers to ``message`` (raises ControlError, ConfigError)."""
    return compose.control_request(socket_of(args), message, timeout=timeout)


def complain(command: str, error: Exception) -> int:
    print(f"proxyfleet {command}: {error}", file=sys.stderr)
    return EXIT_ERROR


def standby(command: str, answer: Mapping[str, Any]) -> int:
    print(
        f"proxyfleet {command}: this daemon stands by ({answer.get('role', '')}); "
        "ask the leader's box",
        file=sys.stderr,
    )
    return EXIT_STANDBY
