"""``proxyfleet deploy print unit|alerts|dashboard``: the files a box needs, from the package.

The systemd unit, the Prometheus alert rules and the Grafana dashboard ship in
the wheel (package data), so an install from a wheel or with pipx has them
without a checkout. They are printed, not installed: the operator redirects
them where they belong (``> /etc/systemd/system/proxyfleet.service``), pipes
them to a checker (``| promtool check rules /dev/stdin``) or diffs them against
what is installed after an upgrade, and the command needs no privileges.

``unit`` is the shipped unit with ``ExecStart=`` and ``ExecPaths=`` pointing at
this program's own venv (``--prefix`` for another one), so a venv elsewhere than
/opt/proxyfleet runs under the sandbox unedited (``NoExecPaths=/`` allows only
``ExecPaths=``: the venv, /usr, and the directory of the Python the venv was made
from when it is not under /usr).
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path
from typing import Any

from reconciler.cli import exitcodes

FILES = {
    "unit": "systemd/proxyfleet.service",
    "alerts": "prometheus/alerts.yaml",
    "dashboard": "grafana/proxyfleet.json",
}
SHIPPED_PREFIX = "/opt/proxyfleet"
"""The venv the shipped unit names (docs/operations.md, install step 3)."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "deploy",
        help="print the systemd unit, the alert rules or the Grafana dashboard",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="deploy_command", required=True, metavar="COMMAND")
    show = commands.add_parser(
        "print",
        help="print one of the shipped files on stdout",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show.add_argument("what", choices=sorted(FILES), help="which file")
    show.add_argument(
        "--prefix",
        type=Path,
        metavar="DIR",
        help=f"unit: the venv to run (default: this program's, {sys.prefix})",
    )
    show.set_defaults(func=run_print)


def run_print(args: argparse.Namespace) -> int:
    text = shipped(args.what)
    if args.what == "unit":
        prefix = args.prefix or Path(sys.prefix)
        python = Path(sys.base_prefix).resolve()
        text = unit_for(text, prefix=prefix, python=python)
        for hidden in (
            p for p in (prefix, python) if p.is_relative_to("/root") or p.is_relative_to("/home")
        ):
            print(
                f"proxyfleet deploy: {hidden} is under /root or /home, which the unit's "
                "ProtectHome=yes hides: the daemon would not start (203/EXEC); install into "
                "/opt/proxyfleet (docs/operations.md, install step 3).",
                file=sys.stderr,
            )
    sys.stdout.write(text)
    return exitcodes.OK


def shipped(what: str) -> str:
    """The file as the package carries it."""
    return resources.files("reconciler").joinpath("deploy", FILES[what]).read_text("utf-8")


def unit_for(text: str, *, prefix: Path, python: Path) -> str:
    """The unit ``text`` running ``prefix``/bin/proxyfleet, with ``prefix`` (and ``python``,
    the base interpreter's prefix, unless under /usr) in ``ExecPaths=``."""
    paths = ["/usr", str(prefix)]
    if not python.is_relative_to("/usr") and not python.is_relative_to(prefix):
        paths.append(str(python))
    lines = []
    for line in text.splitlines(keepends=True):
        if line.startswith("ExecStart="):
            line = line.replace(f"{SHIPPED_PREFIX}/bin/", f"{prefix}/bin/", 1)
        elif line.startswith("ExecPaths="):
            line = f"ExecPaths={' '.join(paths)}\n"
        lines.append(line)
    return "".join(lines)
