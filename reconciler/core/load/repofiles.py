"""The files of a fleet repo, read as untrusted input: regular files only, sizes bounded.

Whoever can push to the fleet repo decides what lands in the checkout. A
manifest that is a symbolic link could point at a secret of the management
box (its content would reach error messages and the status branch) or at
``/dev/zero`` (read until memory runs out). So this module:

- walks the tree without following links, and reports every link or special
  file whose name looks like a manifest (and every linked directory, which
  would otherwise hide manifests silently) as a problem naming the file, never
  reading it, never showing where it points;
- opens each file with ``O_NOFOLLOW`` and checks the opened descriptor is a
  regular file, so a swap between the walk and the read changes nothing;
- reads at most ``ReadLimits.max_file_bytes`` of one file and
  ``ReadLimits.max_repo_bytes`` over the whole repo; past either, a problem.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

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


def walk(root: Path) -> list[Entry]:
    """Every manifest candidate under ``root``, sorted, links and special files flagged."""
    found: list[Entry] = []
    for directory, subdirs, files in os.walk(root, followlinks=False):
        base = Path(directory).relative_to(root)
        kept = []
        for name in sorted(d for d in subdirs if not d.startswith(".")):
            if os.path.islink(os.path.join(directory, name)):
                found.append(Entry((base / name).as_posix(), _LINKED_DIR))
            else:
                kept.append(name)
        subdirs[:] = kept
        for name in files:
            if name.startswith(".") or not name.endswith(MANIFEST_SUFFIXES):
                continue
            rel = (base / name).as_posix()
            found.append(Entry(rel, _kind_problem(os.lstat(os.path.join(directory, name)))))
    return sorted(found, key=lambda e: e.rel)


_LINKED_DIR = "is a symbolic link to a directory; links are not followed in the fleet repo"
_LINK = "is a symbolic link; manifests must be regular files (links are not followed)"


def _kind_problem(info: os.stat_result) -> str:
    if stat.S_ISLNK(info.st_mode):
        return _LINK
    if stat.S_ISDIR(info.st_mode):
        return "is a directory; manifests must be regular files"
    if stat.S_ISFIFO(info.st_mode):
        return "is a FIFO (named pipe); manifests must be regular files"
    if not stat.S_ISREG(info.st_mode):
        return "is not a regular file; manifests must be regular files"
    return ""


class Reader:
    """Reads manifest files under one root, keeping the running total against the limits."""

    def __init__(self, root: Path, limits: ReadLimits) -> None:
        self._root = root
        self._limits = limits
        self.total = 0

    def siblings(self, rel: str) -> list[str]:
        """The regular files beside ``rel`` (repo-relative paths; none for a path that leaves
        the repo or a folder that is missing or a link): what a typo in ``rel`` meant."""
        parent = PurePosixPath(rel).parent
        if parent.is_absolute() or ".." in parent.parts:
            return []
        folder = self._root / parent
        if folder.is_symlink() or not folder.is_dir():
            return []
        with os.scandir(folder) as entries:
            names = [e.name for e in entries if e.is_file(follow_symlinks=False)]
        return sorted(str(parent / name) for name in names)

    def read(self, rel: str) -> bytes | Problem:
        """The bytes of ``rel``, or the Problem that stops it from being read.

        Every component of ``rel`` is opened without following links, so neither the
        file nor a folder on its way may be a link (a userData file or a secret is
        named by a path someone wrote, not found by the walk).
        """
        try:
            fd = _open_beneath(self._root, rel)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return Problem(rel, 0, 0, "", _LINK)
            return Problem(rel, 0, 0, "", f"cannot read: {exc.strerror}")
        try:
            kind = _kind_problem(os.fstat(fd))
            if kind:  # a directory or FIFO is refused by what it is, before any read
                return Problem(rel, 0, 0, "", kind)
            left = self._limits.max_repo_bytes - self.total
            cap = min(self._limits.max_file_bytes, left)
            data = _read_up_to(fd, cap + 1)
        finally:
            os.close(fd)
        if len(data) > self._limits.max_file_bytes:
            return Problem(
                rel, 0, 0, "", f"larger than the limit of {_size(self._limits.max_file_bytes)}"
            )
        if len(data) > cap:
            return Problem(
                rel,
                0,
                0,
                "",
                f"the repo's manifests exceed the limit of {_size(self._limits.max_repo_bytes)} "
                "in total; this file and the ones after it were not read",
            )
        self.total += len(data)
        return data


def _read_up_to(fd: int, limit: int) -> bytes:
    """At most ``limit`` bytes of ``fd``, read to its end or the limit."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        chunk = os.read(fd, min(limit - size, 1024 * 1024))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _open_beneath(root: Path, rel: str) -> int:
    """A descriptor of ``root/rel``, each component opened with O_NOFOLLOW (OSError else)."""
    cloexec = getattr(os, "O_CLOEXEC", 0)
    *folders, name = rel.split("/")
    directory = os.open(root, os.O_RDONLY | os.O_DIRECTORY | cloexec)
    try:
        for folder in folders:
            flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | cloexec
            try:
                inner = os.open(folder, flags, dir_fd=directory)
            except NotADirectoryError:  # Linux says so of a link too: tell them apart
                if stat.S_ISLNK(os.lstat(folder, dir_fd=directory).st_mode):
                    raise OSError(errno.ELOOP, "a folder on the way is a link") from None
                raise
            os.close(directory)
            directory = inner
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | cloexec
        return os.open(name, flags, dir_fd=directory)
    finally:
        os.close(directory)


def _size(n: int) -> str:
    if n % (1024 * 1024) == 0:
        return f"{n // (1024 * 1024)} MiB"
    if n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} bytes"
