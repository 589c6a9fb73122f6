"""The repo loader seam: the fleet repo under a directory, read as untrusted input and loaded.

Real: ``load_repo_at`` (reconciler.adapters.repo.diskfiles), the core's loader over the
files on disk (no links followed, sizes bounded). No fake of the loader itself: unit tests
load real files in a temporary directory, and the core's tests use ``MemoryRepoFiles``
(reconciler.core.load.memoryfiles) under the same loader, contract-tested against the
disk's reader in tests/test_repo_files_contract.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from reconciler.core.load.loadmemo import LoadMemo
from reconciler.core.load.repofiles import ReadLimits
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.model.fleet import Repo


class RepoLoader(Protocol):
    def __call__(
        self,
        root: Path,
        *,
        limits: ReadLimits = ...,
        secrets: SecretAccess = ...,
        memo: LoadMemo | None = None,
    ) -> Repo:
        """The valid fleet repo under ``root``, read within ``limits`` and with ``secrets``;
        raises InvalidInput listing every problem. Cost: a walk of ``root`` and a read of
        each manifest, bounded by ``limits``."""
        ...
