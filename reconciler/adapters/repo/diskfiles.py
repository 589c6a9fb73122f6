"""The files of a fleet repo checkout on disk, read as untrusted input: ``DiskRepoFiles``.

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

``load_repo_at`` is the loader (reconciler.core.load.manifests.load_repo) over
a root directory: what ``validate``, ``plan``, ``apply`` and the daemon call.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from reconciler.core.load.expansion import ExpandLimits
from reconciler.core.load.loadmemo import LoadMemo
from reconciler.core.load.manifests import DEFAULT_EXPAND, DEFAULT_LIMITS, load_repo
from reconciler.core.load.repofiles import (
    LINK,
    LINKED_DIR,
    MANIFEST_SUFFIXES,
    Entry,
    FileKind,
    ReadCounter,
    ReadLimits,
    kind_problem,
)
from reconciler.core.load.secretrefs import CHECK_ONLY, SecretAccess
from reconciler.errors import InvalidInput, Problem
from reconciler.model.fleet import Repo


def load_repo_at(
    root: Path,
    *,
    limits: ReadLimits = DEFAULT_LIMITS,
    secrets: SecretAccess = CHECK_ONLY,
    expand: ExpandLimits = DEFAULT_EXPAND,
    memo: LoadMemo | None = None,
) -> Repo:
    """The valid fleet repo under ``root``, or ``InvalidInput`` with every problem (see
    ``load_repo``); files are read as this module says, within ``limits``."""
    if not root.is_dir():
        raise InvalidInput([Problem(str(root), 0, 0, "", "not a directory")])
    return load_repo(DiskRepoFiles(root, limits), secrets=secrets, expand=expand, memo=memo)


def manifest_files(root: Path) -> list[str]:
    """Paths (relative, '/'-separated, sorted) of every manifest file under ``root``."""
    return [entry.rel for entry in DiskRepoFiles(root, DEFAULT_LIMITS).walk() if not entry.problem]


class DiskRepoFiles:
    """The ``RepoFiles`` of the checkout under ``root``, for one load."""

    def __init__(self, root: Path, limits: ReadLimits) -> None:
        self._root = root
        self._counter = ReadCounter(limits)

    @property
    def total(self) -> int:
        """Bytes handed out so far."""
        return self._counter.total

    def walk(self) -> list[Entry]:
        root = self._root
        found: list[Entry] = []
        for directory, subdirs, files in os.walk(root, followlinks=False):
            base = Path(directory).relative_to(root)
            kept = []
            for name in sorted(d for d in subdirs if not d.startswith(".")):
                if os.path.islink(os.path.join(directory, name)):
                    found.append(Entry((base / name).as_posix(), LINKED_DIR))
                else:
                    kept.append(name)
            subdirs[:] = kept
            for name in files:
                if name.startswith(".") or not name.endswith(MANIFEST_SUFFIXES):
                    continue
                rel = (base / name).as_posix()
                info = os.lstat(os.path.join(directory, name))
                found.append(Entry(rel, kind_problem(_kind(info))))
        return sorted(found, key=lambda e: e.rel)

    def kind(self, rel: str) -> FileKind | str:
        try:
            return _kind(os.lstat(self._root / rel))
        except FileNotFoundError:
            return FileKind.MISSING
        except OSError as exc:
            return f"cannot be read: {exc.strerror}"

    def siblings(self, rel: str) -> list[str]:
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
        """Every component of ``rel`` is opened without following links, so neither the
        file nor a folder on its way may be a link (a userData file or a secret is
        named by a path someone wrote, not found by the walk)."""
        try:
            fd = _open_beneath(self._root, rel)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return Problem(rel, 0, 0, "", LINK)
            return Problem(rel, 0, 0, "", f"cannot read: {exc.strerror}")
        try:
            kind = kind_problem(_kind(os.fstat(fd)))
            if kind:  # a directory or FIFO is refused by what it is, before any read
                return Problem(rel, 0, 0, "", kind)
            data = _read_up_to(fd, self._counter.cap() + 1)
        finally:
            os.close(fd)
        return self._counter.take(rel, data)


def _kind(info: os.stat_result) -> FileKind:
    mode = info.st_mode
    if stat.S_ISLNK(mode):
        return FileKind.LINK
    if stat.S_ISDIR(mode):
        return FileKind.FOLDER
    if stat.S_ISFIFO(mode):
        return FileKind.FIFO
    if stat.S_ISREG(mode):
        return FileKind.FILE
    return FileKind.SPECIAL


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
