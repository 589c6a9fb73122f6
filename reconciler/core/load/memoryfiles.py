"""A fleet repo held in memory: the ``RepoFiles`` of tests, under the disk's rules.

``MemoryRepoFiles({"fleet.yaml": b"...", "proxies/web.yaml": b"..."})`` serves
those files; a value of ``FileKind.LINK``, ``FIFO`` or ``SPECIAL`` stands for a
path that is such a thing, refused as the disk refuses it. Folders are implied
by the paths; a folder given as ``FileKind.LINK`` hides (and refuses) what
lies under it. Reads count against ``ReadLimits`` as the disk's do. Nothing
here touches the file system.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath

from reconciler.core.load.repofiles import (
    LINK,
    LINKED_DIR,
    MANIFEST_SUFFIXES,
    NO_SUCH_FILE,
    Entry,
    FileKind,
    ReadCounter,
    ReadLimits,
    kind_problem,
)
from reconciler.errors import Problem

DEFAULT_LIMITS = ReadLimits()


class MemoryRepoFiles:
    """The ``RepoFiles`` of ``files`` (path -> bytes, or the kind of a path that is not a
    regular file)."""

    def __init__(
        self, files: Mapping[str, bytes | FileKind], limits: ReadLimits = DEFAULT_LIMITS
    ) -> None:
        self._files = dict(files)
        self._counter = ReadCounter(limits)

    def walk(self) -> list[Entry]:
        found = []
        for rel, content in self._files.items():
            parts = rel.split("/")
            if any(p.startswith(".") for p in parts) or self._behind_link(rel):
                continue
            if content is FileKind.LINK and not rel.endswith(MANIFEST_SUFFIXES):
                found.append(Entry(rel, LINKED_DIR))  # a linked folder
            elif rel.endswith(MANIFEST_SUFFIXES):
                found.append(Entry(rel, kind_problem(_kind_of(content))))
        return sorted(found, key=lambda e: e.rel)

    def kind(self, rel: str) -> FileKind | str:
        if rel in self._files:
            return _kind_of(self._files[rel])
        if any(path.startswith(f"{rel}/") for path in self._files):
            return FileKind.FOLDER
        return FileKind.MISSING

    def siblings(self, rel: str) -> list[str]:
        parent = PurePosixPath(rel).parent
        if parent.is_absolute() or ".." in parent.parts or self._behind_link(rel):
            return []
        return sorted(
            path
            for path, content in self._files.items()
            if PurePosixPath(path).parent == parent and isinstance(content, bytes)
        )

    def read(self, rel: str) -> bytes | Problem:
        if self._behind_link(rel):
            return Problem(rel, 0, 0, "", LINK)
        content = self._files.get(rel)
        if content is None:
            kind = self.kind(rel)
            message = kind_problem(FileKind.FOLDER) if kind is FileKind.FOLDER else NO_SUCH_FILE
            return Problem(rel, 0, 0, "", message)
        if isinstance(content, FileKind):
            return Problem(rel, 0, 0, "", kind_problem(content))
        return self._counter.take(rel, content[: self._counter.cap() + 1])

    def _behind_link(self, rel: str) -> bool:
        """True when a folder on the way to ``rel`` is a link."""
        parts = rel.split("/")[:-1]
        return any(
            self._files.get("/".join(parts[: i + 1])) is FileKind.LINK for i in range(len(parts))
        )


def _kind_of(content: bytes | FileKind) -> FileKind:
    return FileKind.FILE if isinstance(content, bytes) else content
