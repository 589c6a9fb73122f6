"""A proxy's userData: where it is written, its text read once, and where its lines sit.

userData is written inline in a manifest (``spec.cloudInit.userData``, or fleet.yaml's
``spec.proxyDefaults``) or in a file of the fleet repo that ``cloudInit.userDataFile``
names. This module reads it from where it is written, has its ``${proxy.*}``
variables substituted (reconciler.core.load.variables), and maps a line of the text
back to the file an operator can open, for every later check (cloud-config,
secret references, variables).

**The file.** ``userDataFile`` names a file relative to the repo root.
Whoever can push decides what the path says, so the file is read as strictly as a
manifest (reconciler.adapters.repo.diskfiles): a path that leaves the repo
(absolute, or through ``..``), a name on the way that starts with ``.`` (the walk
skips those, and ``.git/`` is git's own), a link anywhere on the way, a missing or
special file, one past the read limit (1 MiB, as a manifest) or one that is not
UTF-8 is a problem at the manifest's ``userDataFile`` field. So is a name ending in
``.yaml``/``.yml``: every such file in the repo is read as a manifest. Each file is
read once per load, however many proxies share it. The text that comes out,
variables in, is what the proxy's model, and so its digest, carries: editing a
shared file rolls every proxy that uses it, and a file whose substituted text
equals a proxy's inline userData gives the very same digest.

**Its lines.** userData written in a manifest is a string inside YAML, usually a
block scalar::

    cloudInit:
      userData: |          <- the value's mark (line L)
        #cloud-config      <- userData line 1 = manifest line L + 1
        packages: [squid]  <- userData line 2 = manifest line L + 2

A literal block keeps one manifest line per userData line, so an error found
inside userData (a cloud-config key, a secret reference, a variable) is
reported at the manifest line an operator can jump to. A quoted or plain
one-line string has no such mapping: its errors point at the value itself.

userData read from a ``userDataFile`` is its own file: an error inside it is
reported at that file's line and column (once, however many proxies share it,
when the message is the same for all of them). Variables never hold a line break
(reconciler.core.load.variables), so substituting them moves no line.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import PurePosixPath
from typing import Final

from reconciler.core.load import proxydefaults, variables
from reconciler.core.load.reading import ProxyReading, UserDataSource
from reconciler.core.load.repofiles import MANIFEST_SUFFIXES, RepoFiles
from reconciler.core.load.schemacheck import did_you_mean
from reconciler.core.load.yamlload import Document, FieldPath, Mark, format_path
from reconciler.errors import Problem

FILE_KEY: Final = "userDataFile"
USER_DATA: Final[FieldPath] = ("spec", "cloudInit", "userData")
FIELD: Final = "spec.cloudInit.userData"
VENDOR_DATA: Final[FieldPath] = ("spec", "cloudInit", "vendorData")


def vendor_source(proxy: ProxyReading, fleet: Document | None) -> UserDataSource:
    """Where the proxy's vendorData was written: its manifest, or fleet.yaml's defaults."""
    if fleet is not None and proxydefaults.inherits(proxy.inherited, VENDOR_DATA):
        return UserDataSource(fleet, (*proxydefaults.DEFAULTS_PATH, *VENDOR_DATA[1:]))
    return UserDataSource(proxy.document, VENDOR_DATA)


def manifest_mark(
    document: Document, lines: Sequence[str], line: int, *, path: FieldPath = USER_DATA
) -> Mark:
    """The manifest position of userData line ``line`` (1-based) of the field at ``path``.

    ``lines`` are the manifest file's lines (to tell a block scalar from a
    one-line string by the ``|``/``>`` at the value's mark).
    """
    mark = document.value_mark(path)
    text = lines[mark.line - 1] if 0 < mark.line <= len(lines) else ""
    if text[mark.column - 1 : mark.column] not in ("|", ">"):
        return mark
    target = mark.line + max(line, 1)
    below = lines[target - 1] if target <= len(lines) else ""
    return Mark(target, len(below) - len(below.lstrip(" ")) + 1)


def problem(
    source: UserDataSource,
    lines: Mapping[str, Sequence[str]],
    line: int,
    message: str,
    *,
    column: int = 0,
) -> Problem:
    """A problem at userData line ``line`` (and ``column``, 1-based; 0: the line's first
    character) of ``source``; ``lines`` holds every file's lines by its path."""
    if source.file is not None:
        text = lines.get(source.file, [])
        here = text[line - 1] if 0 < line <= len(text) else ""
        indent = len(here) - len(here.lstrip(" ")) + 1
        return Problem(source.file, line, column or indent, "", message)
    document = source.document
    manifest = lines.get(document.file, [])
    mark = manifest_mark(document, manifest, line, path=source.path)
    start = document.value_mark(source.path)
    if column and mark != start:
        # a block scalar's lines lose the block's indentation (its first line's)
        first = next((s for s in manifest[start.line :] if s.strip()), "")
        mark = Mark(mark.line, len(first) - len(first.lstrip(" ")) + column)
    return Problem(document.file, mark.line, mark.column, format_path(source.path), message)


def field_problem(source: UserDataSource, message: str) -> Problem:
    """A problem about the userData as a whole, at the manifest field that wrote it."""
    mark = source.document.value_mark(source.path)
    return Problem(source.document.file, mark.line, mark.column, format_path(source.path), message)


def line_at(text: str, offset: int) -> int:
    """The 1-based line of character ``offset`` in ``text``."""
    return text.count("\n", 0, offset) + 1


class UserDataFiles:
    """The userData files of one load, each read once (its text, or why it cannot be)."""

    def __init__(self, reader: RepoFiles) -> None:
        self._reader = reader
        self._seen: dict[str, str | Problem] = {}

    def text(self, rel: str) -> str | Problem:
        """The file's text, or a Problem (``message`` only: the caller pins it)."""
        if rel not in self._seen:
            self._seen[rel] = self._load(rel)
        return self._seen[rel]

    def _load(self, rel: str) -> str | Problem:
        raw = self._reader.read(rel)
        if isinstance(raw, Problem):
            message = raw.message.replace("manifests must be", "userData files must be")
            if "No such file" in message:
                message = "does not exist" + did_you_mean(rel, self._reader.siblings(rel))
            elif message.startswith("larger than"):
                message = f"is {message}"
            return Problem(rel, 0, 0, "", message)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            return Problem(rel, 0, 0, "", f"is not UTF-8 text ({exc.reason} at line {line})")


def normalize(written: str) -> str | Problem:
    """The repo-relative, '/'-separated path ``written`` names, or why it may not be read."""
    path = PurePosixPath(written)
    if path.is_absolute():
        return Problem("", 0, 0, "", "must be a path relative to the repo root")
    if ".." in path.parts:
        return Problem("", 0, 0, "", "leaves the repo ('..'); name a file inside it")
    if not path.parts:
        return Problem("", 0, 0, "", "names no file")
    hidden = next((part for part in path.parts if part.startswith(".")), None)
    if hidden is not None:
        # The walk skips such names, and the daemon's checkout keeps git's own files in .git/
        return Problem(
            "",
            0,
            0,
            "",
            f"names a hidden file or folder ({hidden!r}); a name starting with '.' is not the "
            "repo's content (.git/ is git's own), so it is not read",
        )
    if path.name.endswith(MANIFEST_SUFFIXES):
        return Problem(
            "",
            0,
            0,
            "",
            "ends in .yaml/.yml: every such file in the repo is read as a manifest; name it "
            "e.g. squid.cloud-config",
        )
    return path.as_posix()


def source_of(proxy: ProxyReading, fleet: Document | None) -> UserDataSource:
    """Where the proxy's userData field was written (its manifest, or fleet.yaml's defaults)."""
    key = FILE_KEY if proxy.user_data_file is not None else "userData"
    path: FieldPath = ("spec", "cloudInit", key)
    if fleet is not None and proxydefaults.inherits(proxy.inherited, path):
        return UserDataSource(fleet, (*proxydefaults.DEFAULTS_PATH, "cloudInit", key))
    return UserDataSource(proxy.document, path)


def resolve(
    proxy: ProxyReading,
    fleet: Document | None,
    files: UserDataFiles,
    lines: MutableMapping[str, Sequence[str]],
) -> tuple[ProxyReading, list[Problem]]:
    """The reading with its userData read and substituted, and the problems found on the way.

    ``lines`` holds every manifest's lines by path; a userData file's are added.
    """
    source = source_of(proxy, fleet)
    text = proxy.user_data
    if proxy.user_data_file is not None:
        rel = normalize(proxy.user_data_file)
        found = files.text(rel) if isinstance(rel, str) else rel
        if isinstance(found, Problem):
            mark = source.document.value_mark(source.path)
            message = f"{proxy.user_data_file!r} {found.message}"
            where = Problem(
                source.document.file, mark.line, mark.column, format_path(source.path), message
            )
            return proxy.with_user_data(None, source), [where]
        assert isinstance(rel, str)
        lines.setdefault(rel, found.splitlines())
        text, source = found, UserDataSource(source.document, source.path, rel)
    if text is None:
        return proxy.with_user_data(None, source), []
    text, findings = variables.substitute(text, _values(proxy))
    problems = [problem(source, lines, f.line, f.message, column=f.column) for f in findings]
    return proxy.with_user_data(text, source), problems


def _values(proxy: ProxyReading) -> variables.Values:
    start = proxy.document.start
    return variables.Values(
        name=proxy.name,
        zone=proxy.zone,
        host=proxy.host,
        labels=dict(proxy.labels),
        where=f"{proxy.document.file}:{start.line}:{start.column}",
    )
