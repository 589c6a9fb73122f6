"""``apply``'s check of the checkout against the revision the fleet last applied: the
``--allow-older`` flag and what is said (docs/operations.md, "apply from a checkout behind the
fleet"). Where the checkout stands is asked of git (reconciler.cli.compose.fleet_standing)."""

from __future__ import annotations

import argparse
import sys

from reconciler.model.checkout import Standing


def add_allow_older_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--allow-older",
        action="store_true",
        help="apply a checkout that does not descend from the revision the fleet last applied",
    )


def not_behind(where: Standing, *, allow_older: bool) -> bool:
    """Say where the checkout stands when it matters (one line on stderr); False: refuse."""
    if where.unknown:
        print(
            f"proxyfleet apply: the fleet's revision is not known ({where.unknown}); "
            "going on without comparing.",
            file=sys.stderr,
        )
        return True
    if not where.behind:
        return True
    behind = f"your checkout {where.checkout[:12]} is behind the fleet's {where.fleet[:12]}"
    if allow_older:
        print(f"proxyfleet apply: {behind}; going on (--allow-older).", file=sys.stderr)
        return True
    print(f"proxyfleet apply: {behind}; pull, or pass --allow-older", file=sys.stderr)
    return False
