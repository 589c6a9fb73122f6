"""Secrets as values: a name, a decrypted value that never prints, and its fingerprint.

A fleet repo keeps each secret age-encrypted in ``secrets/NAME.age``; userData
names one as ``${secret:NAME}``. The value is decrypted on the management box
(reconciler.core.load.secretrefs) and rides in ``CloudInit.secrets`` down to the seed
ISO, the only place it is written. Everywhere else it shows as ``(sensitive)``:
its ``repr`` and ``str`` say so, so a stray ``%s`` or ``%r`` leaks nothing.

``fingerprint`` is what the spec digest covers instead of the value: a keyed
hash (HMAC-SHA256 under a key derived from the box's age identity, see
reconciler.adapters.secrets.agesecrets), so a rotated secret changes the digest while
the digest, which lands in domain metadata and the status branch, gives nobody
without the identity a way to test guesses of a short password.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

SENSITIVE = "(sensitive)"
"""How a secret's value is shown anywhere it would otherwise appear."""

SECRETS_DIR = "secrets"
"""The folder, at the repo root, that holds ``NAME.age`` files."""

SUFFIX = ".age"

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
"""A secret's name: lower case, digits, ``_.-``; at most 63 characters. No ``/``: a name
is one file directly in ``secrets/``."""

_REFERENCE = re.compile(r"\$\{secret:([^}\n]*)\}")


@dataclass(frozen=True, slots=True)
class Reference:
    """One ``${secret:NAME}`` in a text: the name as written and where it starts."""

    name: str
    offset: int
    """Characters from the start of the text to the ``$``."""


def references(text: str) -> Iterator[Reference]:
    """Every ``${secret:NAME}`` in ``text``, in order (names not yet checked)."""
    for match in _REFERENCE.finditer(text):
        yield Reference(match.group(1), match.start())


def secret_file(name: str) -> str:
    """The repo-relative path of secret ``name``."""
    return f"{SECRETS_DIR}/{name}{SUFFIX}"


def substitute(text: str, values: Mapping[str, str]) -> str:
    """``text`` with every ``${secret:NAME}`` replaced by ``values[NAME]``.

    Raises KeyError for a name ``values`` lacks: rendering with a secret missing
    would put a literal ``${secret:...}`` into a guest, so it must never pass.
    """
    return _REFERENCE.sub(lambda match: values[match.group(1)], text)


@dataclass(frozen=True, slots=True)
class SecretValue:
    """A decrypted secret. ``value`` never prints; ``fingerprint`` is a keyed hash of it."""

    name: str
    value: str = field(repr=False)
    fingerprint: str = field(repr=False)

    def __repr__(self) -> str:
        return f"SecretValue({self.name!r}, {SENSITIVE})"

    def __str__(self) -> str:
        return SENSITIVE
