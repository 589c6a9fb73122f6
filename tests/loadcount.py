"""Count the loads of a fleet repo: the tests that say a run reads its repo once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.model import Repo


def count_loads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The root of every load through the composition root's loader (``compose.load``:
    the engine's, ``apply``'s and the cycle's ``fleet_of``), in order."""
    seen: list[Path] = []

    def load(root: Path, **kwargs: Any) -> Repo:
        seen.append(root)
        return load_repo_at(root, **kwargs)

    monkeypatch.setattr("reconciler.cli.compose.load", load)
    return seen
