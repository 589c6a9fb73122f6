"""Shared fixtures. Integration and lab fixtures live in their own conftest files."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _root_logger_as_it_was() -> Iterator[None]:
    """The root logger's handlers and level after each test as before it: ``main()`` sets a
    handler on the stderr of its moment, which pytest closes once the test ends; a later
    test that logs without ``main()`` would write "--- Logging error ---" into its own
    captured stderr."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture
def example_repo() -> Path:
    return ROOT / "examples" / "fleet-repo"
