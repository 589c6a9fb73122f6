"""Helpers for the lab tests (a module of its own: conftest modules are not importable)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def lab_cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """Run ``python -m lab ARGS`` from the repo root; fail the test with its output if it fails."""
    proc = subprocess.run(
        [sys.executable, "-m", "lab", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if proc.returncode not in (0, 3):
        pytest.fail(
            f"python -m lab {' '.join(args)} exited {proc.returncode}:\n"
            f"{proc.stdout}\n{proc.stderr}"
        )
    return proc
