from __future__ import annotations

import subprocess
import sys

from reconciler import __version__


def test_python_dash_m_reconciler_prints_the_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "reconciler", "--version"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.startswith(f"proxyfleet {__version__} (commit "), out.stdout
