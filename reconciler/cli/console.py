"""``proxyfleet console NAME``: attach this terminal to a proxy's serial console.

The proxy's VM is looked up on the hosts of fleet.yaml (read now over SSH, as
``inventory`` does; the daemon need not run), then its first serial port is
opened through the host's forwarded libvirt connection, as ``virsh console``
does. On a terminal the session is raw: every key, Ctrl-C included, goes to
the guest; Ctrl-] ends the session (as in virsh) and the terminal is
restored. Press Enter to wake a login prompt. Without a terminal, standard
input is sent as it is and its end ends the session.

When a replace has two VMs of the proxy side by side, the running one created
last is attached (``--domain`` picks another). ``--force`` takes the console
over from another session (virsh's ``--force``).

The guest's output is shown as text: terminal control sequences (colours,
cursor moves, window titles, clipboard writes) and other control characters
are dropped, since the guest is not trusted and this terminal may be root's.
``--raw`` passes them through, for full-screen programs on a guest you trust.

Exit codes: 0 detached (Ctrl-], end of input, or the console closed by the host),
1 the repo or config is unusable, the proxy has no VM, its host cannot be
reached or the console is refused.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import sys
import termios
import threading
import tty
from collections.abc import Callable, Iterator
from typing import Any

from reconciler.cli import compose
from reconciler.cli.common import (
    add_host_access_arguments,
    add_repo_argument,
    config_error,
    daemon_settings,
    ssh_settings,
)
from reconciler.cli.inventory import configure_logging
from reconciler.cli.terminalfilter import TerminalFilter
from reconciler.engine.observe import observe
from reconciler.engine.pool import HostPool
from reconciler.errors import ConfigError, HostError
from reconciler.model import DomainState, Inventory
from reconciler.model.settings import ApplySettings
from reconciler.ports.console import ConsoleStream
from reconciler.ports.hypervisor import Hypervisor

ESCAPE = b"\x1d"
"""Ctrl-]: ends the session, as in ``virsh console``."""
EXIT_OK = 0
EXIT_ERROR = 1

Opener = Callable[[Hypervisor, str, bool], ConsoleStream]
"""Opens (hypervisor, domain, force) -> a console stream; the real one: compose.open_console."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "console",
        help="attach to a proxy VM's serial console (Ctrl-] detaches)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", metavar="NAME", help="the proxy (metadata.name)")
    add_repo_argument(parser)
    add_host_access_arguments(parser)
    parser.add_argument("--domain", metavar="DOMAIN", help="attach to this domain of the proxy")
    parser.add_argument(
        "--force", action="store_true", help="take the console over from another session"
    )
    parser.add_argument(
        "--raw",
        action="store_true",
        help="pass the guest's escape sequences to this terminal (only for a guest you trust)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, *, opener: Opener | None = None) -> int:
    configure_logging(args)
    repo = compose.load_repo_or_complain(args.repo)
    if repo is None:
        return EXIT_ERROR
    try:
        ssh = ssh_settings(args, daemon_settings(args).ssh)
    except ConfigError as exc:
        return config_error(exc)
    pool = HostPool(compose.host_factory(ssh))
    try:
        hosts = pool.sync(repo.fleet.hosts)
        inventory = observe(repo.fleet, hosts, timeout=ApplySettings().observe_timeout).inventory
        found = find_vm(inventory, fleet=repo.fleet.name, proxy=args.name, domain=args.domain)
        if isinstance(found, str):
            print(f"proxyfleet console: {found}", file=sys.stderr)
            return EXIT_ERROR
        host, domain = found
        try:
            console = (opener or compose.open_console)(hosts[host], domain, args.force)
        except HostError as exc:
            print(f"proxyfleet console: {domain} on {host}: {exc}", file=sys.stderr)
            return EXIT_ERROR
        print(
            f"Connected to {domain} on {host} (proxy {args.name}); escape character is ^]",
            file=sys.stderr,
            flush=True,
        )
        ended = session(console, stdin=sys.stdin.fileno(), stdout=sys.stdout.fileno(), raw=args.raw)
        print(f"\r\nDisconnected from {domain} ({ended}).", file=sys.stderr)
        return EXIT_OK
    finally:
        pool.close()


def find_vm(
    inventory: Inventory, *, fleet: str, proxy: str, domain: str | None = None
) -> tuple[str, str] | str:
    """(host, domain) of ``proxy``'s VM in ``fleet``, or why there is none to attach to.

    Several (a replace in progress): the running one created last, unless ``domain``
    names one. An unreachable host is named when the VM was not found elsewhere.
    """
    candidates = [
        (host.name, d)
        for host in inventory.hosts
        for d in host.domains
        if d.owner is not None and d.owner.fleet == fleet and d.owner.proxy == proxy
    ]
    if domain is not None:
        candidates = [(h, d) for h, d in candidates if d.name == domain]
    if not candidates:
        down = [h.name for h in inventory.hosts if not h.reachable]
        what = f"domain {domain} of proxy {proxy}" if domain else f"proxy {proxy}"
        where = f"; unreachable: {', '.join(down)}" if down else ""
        return f"no VM of {what} in fleet {fleet} on any reachable host{where}"
    host, chosen = max(
        candidates,
        key=lambda c: (c[1].state is DomainState.RUNNING, c[1].owner.created if c[1].owner else ""),
    )
    return host, chosen.name


def session(
    console: ConsoleStream,
    *,
    stdin: int,
    stdout: int,
    escape: bytes = ESCAPE,
    raw: bool = False,
) -> str:
    """Copy ``stdin`` to the console and the console to ``stdout`` until one side ends.

    ``stdin`` is put in raw mode while attached when it is a terminal. What the guest
    prints goes through a TerminalFilter unless ``raw``. Returns why the session ended:
    "escape" (Ctrl-]), "end of input" or "closed by the host".
    """
    finished = threading.Event()
    shown = TerminalFilter()

    def to_terminal() -> None:
        try:
            while data := console.read():
                _write_all(stdout, data if raw else shown.feed(data))
        except OSError:
            pass  # the terminal went away; the session ends below
        finally:
            finished.set()

    reader = threading.Thread(target=to_terminal, name="console-out", daemon=True)
    reader.start()
    ended = "closed by the host"
    try:
        with raw_mode(stdin):
            while not finished.is_set():
                ready, _, _ = select.select([stdin], [], [], 0.2)
                if not ready:
                    continue
                data = os.read(stdin, 1024)
                if not data:
                    ended = "end of input"
                    break
                head, hit, _ = data.partition(escape)
                if head:
                    console.write(head)
                if hit:
                    ended = "escape"
                    break
    except HostError:
        ended = "closed by the host"
    finally:
        console.close()
        reader.join(timeout=5)
    return ended


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[None]:
    """The terminal at ``fd`` in raw mode for the block, restored after it (a no-op for a
    pipe or a file).

    Raw from now on, keeping what was typed before (tty.setraw's default, TCSAFLUSH,
    would discard it): the Enter an operator presses while the command still connects
    (seconds on a loaded host) is the one that wakes the login prompt."""
    if not os.isatty(fd):
        yield
        return
    saved = termios.tcgetattr(fd)
    tty.setraw(fd, termios.TCSANOW)
    try:
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
