"""Each proxy's userData, read once: from its manifest or its ``userDataFile``, variables in.

``cloudInit.userDataFile`` names a file of the fleet repo, relative to its root,
whose content is the userData. Whoever can push decides what the path says, so
the file is read as strictly as a manifest (reconciler.adapters.repo.diskfiles): a
path that leaves the repo (absolute, or through ``..``), a name on the way that
starts with ``.`` (the walk skips those, and ``.git/`` is git's own), a link anywhere on the
way, a missing or special file, one past the read limit (1 MiB, as a manifest)
or one that is not UTF-8 is a problem at the manifest's ``userDataFile`` field.
So is a name ending in ``.yaml``/``.yml``: every such file in the repo is read as
a manifest. Each file is read once per load, however many proxies share it.

Then the ``${proxy.*}`` variables are substituted (reconciler.core.load.variables),
for inline userData too. A variable's problem points at its line and column: in
the userData file, or in the manifest that wrote the userData (fleet.yaml's
``spec.proxyDefaults`` when the proxy inherited it). The text that comes out is
what the proxy's model, and so its digest, carries: editing a shared file rolls
every proxy that uses it, and a file whose substituted text equals a proxy's
inline userData gives the very same digest.
"""

from __future__ import annotations

from collections.abc import MutableMapping, Sequence
from pathlib import PurePosixPath

from reconciler.core.load import proxydefaults, userdata, variables
from reconciler.core.load.reading import ProxyReading, UserDataSource
from reconciler.core.load.repofiles import MANIFEST_SUFFIXES, RepoFiles
from reconciler.core.load.schemacheck import did_you_mean
from reconciler.core.load.yamlload import Document, FieldPath, format_path
from reconciler.errors import Problem

FILE_KEY = "userDataFile"


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
    problems = [
        userdata.problem(source, lines, f.line, f.message, column=f.column) for f in findings
    ]
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
