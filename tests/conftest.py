"""Shared fixtures. Integration and lab fixtures live in their own conftest files."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def example_repo() -> Path:
    return ROOT / "examples" / "fleet-repo"
