"""The age identity of the management box, and decryption with it (pyrage).

Fleet repos keep secrets as files the ``age`` command line tool encrypted to
the box's public key (``age -r age1... -o secrets/NAME.age``); the box holds the
matching identity file (what ``age-keygen`` writes: comment lines and one or
more ``AGE-SECRET-KEY-1...`` lines), named by ``secrets.ageIdentityFile`` in the
daemon config or ``--age-identity``. pyrage is the age format in Rust (the
``rage`` implementation) behind a small binding: no subprocess, the plaintext
stays in this process's memory and is never written to a file.

The identity file is read once, bounded in size; a line that is not an age
identity is reported by number, never quoted. Decryption failures become
``DecryptError`` here, the only place pyrage's exceptions are met.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyrage

from reconciler.errors import ConfigError, DecryptError

MAX_IDENTITY_BYTES = 64 * 1024
"""An identity file larger than this is not one (a key line is 74 characters)."""

_PREFIX = "AGE-SECRET-KEY-1"


@dataclass(frozen=True, slots=True)
class AgeIdentity:
    """The identities of one identity file; ``source`` names the file in messages."""

    source: str
    identities: tuple[Any, ...] = field(repr=False)
    """pyrage.x25519.Identity values (pyrage ships no type hints)."""

    def decrypt(self, ciphertext: bytes) -> bytes:
        """The plaintext of an age file (binary or ASCII-armored), or DecryptError."""
        try:
            plain: bytes = pyrage.decrypt(ciphertext, list(self.identities))
        except pyrage.DecryptError as exc:
            raise DecryptError(
                f"does not decrypt with the age identity {self.source}: {exc}"
            ) from exc
        return plain


def _check_kind_and_mode(name: str, info: os.stat_result) -> None:
    """ConfigError unless the opened file is a regular file only its owner may read."""
    if stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{name}: the age identity file is a directory")
    if stat.S_ISFIFO(info.st_mode):
        raise ConfigError(f"{name}: the age identity file is a FIFO (named pipe)")
    if not stat.S_ISREG(info.st_mode):
        raise ConfigError(f"{name}: the age identity file is not a regular file")
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):  # as the SSH private key (ssh.py)
        raise ConfigError(
            f"{name}: the age identity file is accessible by group or others "
            f"(mode {stat.S_IMODE(info.st_mode):04o}); chmod 600 it"
        )


def load_identity(path: Path) -> AgeIdentity:
    """The identities in ``path``; ConfigError naming the file (and line) when unusable."""
    name = str(path)
    # Non-blocking: a FIFO put there would otherwise hang the open (and `plan`) for ever.
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise ConfigError(f"{name}: cannot read the age identity file: {exc.strerror}") from exc
    try:
        _check_kind_and_mode(name, os.fstat(fd))
        raw = os.read(fd, MAX_IDENTITY_BYTES + 1)
    finally:
        os.close(fd)
    if len(raw) > MAX_IDENTITY_BYTES:
        raise ConfigError(f"{name}: larger than {MAX_IDENTITY_BYTES} bytes; not an identity file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{name}: not an age identity file (not UTF-8 text)") from exc
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        try:
            identity = pyrage.x25519.Identity.from_str(line) if line.startswith(_PREFIX) else None
        except pyrage.IdentityError:
            identity = None
        if identity is None:
            raise ConfigError(
                f"{name}:{number}: not an age identity (expected {_PREFIX}..., "
                "as age-keygen writes; the line is not shown)"
            )
        found.append(identity)
    if not found:
        raise ConfigError(f"{name}: holds no age identity ({_PREFIX}... line)")
    return AgeIdentity(name, tuple(found))
