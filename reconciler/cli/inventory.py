"""``proxyfleet inventory``: not built yet."""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(sub: Any) -> None:
    parser = sub.add_parser("inventory", help="(not built yet)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print("proxyfleet inventory: not built yet", file=sys.stderr)
    return 1
