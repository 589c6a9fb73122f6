"""``python -m reconciler`` is the ``proxyfleet`` command."""

import sys

from reconciler.cli import command

sys.exit(command())
