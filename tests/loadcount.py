"""Count the loads of a fleet repo: the tests that say a run reads its repo once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.model import Repo


def count_loads(monkeypatch: pytest.MonkeyPatch, *modules: str) -> list[Path]:
    """The root of every load through ``load_repo_at`` as each of ``modules`` (under
    ``reconciler.``) imported it, in order."""
    seen: list[Path] = []

    def load(root: Path, **kwargs: Any) -> Repo:
        seen.append(root)
        return load_repo_at(root, **kwargs)

    for module in modules:
        monkeypatch.setattr(f"reconciler.{module}.load_repo_at", load)
    return seen
