"""``${secret:NAME}`` in userData: each reference checked, and resolved when it may be.

A reference names ``secrets/NAME.age`` at the repo root, an age-encrypted file.
How far a load goes depends on what the caller holds (``SecretAccess``):

- no identity, values not needed (``validate``): every referenced file must
  exist and be readable as the repo's other files are (a regular file, inside
  the repo, within the read limits);
- an identity (``validate --age-identity``, ``plan``, ``apply``, the daemon):
  each referenced file must also decrypt, to UTF-8 text;
- values needed but no identity (``plan``/``apply`` without one): a reference
  is a problem, since the VM it would make cannot be built.

Every problem is pinned to the manifest line of the reference (see
reconciler.core.load.userdata) and field ``spec.cloudInit.userData``, and names the
secret file. None carries a value. A value is the file's text with one
trailing newline removed (``echo pw | age ...`` adds it; ``printf`` does not).

Each secret is read and decrypted once per load, however many proxies use it.
Its fingerprint (reconciler.model.secrets) is scrypt over the value, salted
with the secret's name: deriving it costs about 32 MiB and a tenth of a second
on purpose, so that the digest in domain metadata and on the status branch
does not let anyone test guesses of a short password cheaply.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from reconciler.core.load import userdata
from reconciler.core.load.loadmemo import LoadMemo, text_key
from reconciler.core.load.reading import ProxyReading
from reconciler.core.load.repofiles import FileKind, RepoFiles
from reconciler.errors import DecryptError, Problem
from reconciler.model.secrets import (
    NAME_PATTERN,
    SECRETS_DIR,
    SecretValue,
    references,
    secret_file,
)

IDENTITY_HINT = "--age-identity FILE, or secrets.ageIdentityFile in the daemon config"


class Decryptor(Protocol):
    """An age identity: reconciler.adapters.secrets.agesecrets.AgeIdentity in production."""

    @property
    def source(self) -> str:
        """Where the identity comes from (a file name), for messages."""

    def decrypt(self, ciphertext: bytes) -> bytes:
        """The plaintext, or DecryptError. Pure computation: no I/O."""


@dataclass(frozen=True, slots=True)
class SecretAccess:
    """What a load may do with secrets: see the module docstring."""

    decryptor: Decryptor | None = None
    need_values: bool = False


CHECK_ONLY = SecretAccess()


def fingerprint(name: str, value: str) -> str:
    """The keyed, slow hash of a secret's value that the spec digest covers."""
    salt = b"proxyfleet/secret/v1\0" + name.encode("utf-8")
    key = hashlib.scrypt(value.encode("utf-8"), salt=salt, n=2**15, r=8, p=1, maxmem=64 << 20)
    return key.hex()


class SecretResolver:
    """Checks and resolves the references of one load; reads each secret file once."""

    def __init__(self, reader: RepoFiles, access: SecretAccess, memo: LoadMemo) -> None:
        self._reader = reader
        self._memo = memo
        self._access = access
        self._seen: dict[str, SecretValue | str | None] = {}

    def resolve(
        self, proxy: ProxyReading, lines: Mapping[str, Sequence[str]]
    ) -> tuple[list[Problem], tuple[SecretValue, ...]]:
        """Problems of the references in the proxy's userData, and the values resolved;
        ``lines``: every file's lines by path (the manifest's, or the userData file's)."""
        problems = list(_misplaced(proxy))
        text, source = proxy.user_data, proxy.source
        if text is None or source is None:
            return problems, ()
        values: dict[str, SecretValue] = {}
        for ref in references(text):
            found = self._secret(ref.name)
            if isinstance(found, SecretValue):
                values[ref.name] = found
            elif found is not None:
                line = userdata.line_at(text, ref.offset)
                problems.append(userdata.problem(source, lines, line, found))
        return problems, tuple(values[name] for name in sorted(values))

    def _secret(self, name: str) -> SecretValue | str | None:
        """The value, a problem message, or None (exists; values not asked for)."""
        if name not in self._seen:
            self._seen[name] = self._load(name)
        return self._seen[name]

    def _load(self, name: str) -> SecretValue | str | None:
        if not NAME_PATTERN.match(name):
            # the name is never quoted: it is the userData's text, which may be anything
            return (
                "invalid secret name in ${secret:...}: lower case letters, digits and _.- "
                "only, starting with a letter or digit, at most 63 characters"
            )
        rel = secret_file(name)
        where = f"secret {name!r} ({rel})"
        folder = _folder_problem(self._reader)
        if folder:
            return f"{where}: {folder}"
        raw = self._reader.read(rel)
        if isinstance(raw, Problem):
            if "No such file" in raw.message:
                return f"{where} does not exist; make it with age (docs/operations.md)"
            # the reader speaks of manifests; the same rules hold for secret files
            return f"{where} {raw.message.replace('manifests must be', 'secret files must be')}"
        decryptor = self._access.decryptor
        if decryptor is None:
            if self._access.need_values:
                return f"{where} needs an age identity to be decrypted ({IDENTITY_HINT})"
            return None
        try:
            plain = decryptor.decrypt(raw)
        except DecryptError as exc:
            return f"{where} {exc}"
        try:
            value = plain.decode("utf-8")
        except UnicodeDecodeError:
            return f"{where} does not decrypt to UTF-8 text"
        value = value.removesuffix("\n").removesuffix("\r")
        print_ = self._memo.fingerprints.get(
            text_key(name, value), lambda: fingerprint(name, value)
        )
        return SecretValue(name, value, print_)


def _folder_problem(files: RepoFiles) -> str:
    """Why ``secrets/`` cannot be read from ('' when it can): it must be a real folder."""
    kind = files.kind(SECRETS_DIR)
    if isinstance(kind, str):
        return f"{SECRETS_DIR}/ {kind}"
    if kind is FileKind.MISSING:
        return f"the repo has no {SECRETS_DIR}/ folder"
    if kind is FileKind.LINK:
        return f"{SECRETS_DIR}/ is a symbolic link; links are not followed in the fleet repo"
    if kind is not FileKind.FOLDER:
        return f"{SECRETS_DIR} is not a folder"
    return ""


def _misplaced(proxy: ProxyReading) -> list[Problem]:
    """References in vendorData or networkConfig: only userData is substituted."""
    document = proxy.document
    found = []
    for key, value in (("vendorData", proxy.vendor_data), ("networkConfig", proxy.network_config)):
        if value is not None and next(references(value), None) is not None:
            mark = document.value_mark(("spec", "cloudInit", key))
            message = "${secret:...} is substituted in userData only; here it would stay literal"
            found.append(
                Problem(document.file, mark.line, mark.column, f"spec.cloudInit.{key}", message)
            )
    return found
