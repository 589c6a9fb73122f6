"""The seam through which a fleet repo's files reach the loader: ``RepoFiles``.

The loader (reconciler.core.load.manifests) does no I/O: it asks a ``RepoFiles``
for the walk, the kind of a path and the bytes of a file, as resolvelib asks
its provider. Two implementations keep the same rules:

- ``reconciler.adapters.repo.diskfiles.DiskRepoFiles``, the checkout on disk,
  read as untrusted input: the walk follows no link, each file is opened
  component by component with ``O_NOFOLLOW``, special files are refused by
  what they are before any read;
- ``reconciler.core.load.memoryfiles.MemoryRepoFiles``, a repo held in memory,
  for tests.

Both report links and special files with the texts below, and count the bytes
they hand out against ``ReadLimits`` with ``ReadCounter``, so a problem reads
the same whichever one served the load.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from reconciler.errors import Problem

MANIFEST_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class ReadLimits:
    """Bounds on what one load of the fleet repo may read."""

    max_file_bytes: int = 1024 * 1024
    """Bytes: the largest manifest file (1 MiB; a thousand proxies fit in far less)."""
    max_repo_bytes: int = 8 * 1024 * 1024
    """Bytes: all manifest files together (8 MiB; pure-Python YAML reads ~1.7 MiB/s)."""


@dataclass(frozen=True, slots=True)
class Entry:
    """One manifest candidate: ``rel`` is its '/'-separated path below the root."""

    rel: str
    problem: str = ""
    """Set when the entry must not be read (a link, a special file)."""


class FileKind(Enum):
    """What a path of the repo is, links not followed."""

    MISSING = "missing"
    FILE = "file"
    FOLDER = "folder"
    LINK = "link"
    FIFO = "fifo"
    SPECIAL = "special"


class RepoFiles(Protocol):
    """The files of one fleet repo, for one load (it counts what it hands out).

    Paths are repo-relative and '/'-separated. Costs: ``walk`` lists the whole
    tree once; ``read`` reads one file; the others look at one path.
    """

    def walk(self) -> list[Entry]:
        """Every manifest candidate (``MANIFEST_SUFFIXES``, no dot-names), sorted by path;
        links and special files carry their problem and are never read."""

    def kind(self, rel: str) -> FileKind | str:
        """What ``rel`` is, not following a link; a str says why it cannot be looked at."""

    def read(self, rel: str) -> bytes | Problem:
        """The bytes of ``rel``, or the Problem (``message`` only) that stops the read: a
        link anywhere on the way, a special or missing file, a file past the limits."""

    def siblings(self, rel: str) -> list[str]:
        """The regular files beside ``rel`` (none for a path that leaves the repo or a
        folder that is missing or a link): what a typo in ``rel`` meant."""


LINKED_DIR = "is a symbolic link to a directory; links are not followed in the fleet repo"
LINK = "is a symbolic link; manifests must be regular files (links are not followed)"
NO_SUCH_FILE = "cannot read: No such file or directory"


def kind_problem(kind: FileKind) -> str:
    """Why a path of ``kind`` is not read as a manifest ('' for a regular file)."""
    match kind:
        case FileKind.FILE:
            return ""
        case FileKind.LINK:
            return LINK
        case FileKind.FOLDER:
            return "is a directory; manifests must be regular files"
        case FileKind.FIFO:
            return "is a FIFO (named pipe); manifests must be regular files"
        case _:
            return "is not a regular file; manifests must be regular files"


class ReadCounter:
    """The running total of one load's reads against ``ReadLimits``."""

    def __init__(self, limits: ReadLimits) -> None:
        self.limits = limits
        self.total = 0

    def cap(self) -> int:
        """The most bytes the next file may have: read one more to tell it went over."""
        return min(self.limits.max_file_bytes, self.limits.max_repo_bytes - self.total)

    def take(self, rel: str, data: bytes) -> bytes | Problem:
        """``data`` (read up to ``cap() + 1`` bytes of ``rel``), counted; or the limit it
        crossed."""
        if len(data) > self.limits.max_file_bytes:
            return Problem(
                rel, 0, 0, "", f"larger than the limit of {_size(self.limits.max_file_bytes)}"
            )
        if len(data) > self.cap():
            return Problem(
                rel,
                0,
                0,
                "",
                f"the repo's manifests exceed the limit of {_size(self.limits.max_repo_bytes)} "
                "in total; this file and the ones after it were not read",
            )
        self.total += len(data)
        return data


def _size(n: int) -> str:
    if n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)} MiB"
    if n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} bytes"
