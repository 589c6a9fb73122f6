"""What loads of the same repo share: a memo its owner passes in, never a module's cache.

The daemon loads its repo every cycle, and two results cost far more than a
look-up: a cloud-config text's findings (20-30 ms: pure-Python YAML, an 86 KB
schema) and a secret's fingerprint (scrypt, about a tenth of a second on
purpose). The engine keeps one ``LoadMemo`` per fleet and hands it to every
load; a load without one gets a fresh memo and remembers nothing after it. A
memo is bounded: a table that fills up starts over.

Keys are sha256 digests: a cloud-config text carries placeholders, never a
secret's value, and a fingerprint is kept by the digest of the secret's name
and value, so the memo holds no plaintext.
"""

from __future__ import annotations

import hashlib

from reconciler.core.memo import Table

KEPT = 4096
"""Entries a table keeps; above ``ExpandLimits.max_proxies``, so one load never evicts its
own."""


class LoadMemo:
    """The tables of one repo's loads: cloud-config findings, secret fingerprints."""

    def __init__(self, size: int = KEPT) -> None:
        self.cloud_configs: Table[bytes, tuple[tuple[tuple[int, str], ...], int]] = Table(size)
        """A cloud-config text's findings and the YAML values it holds, by its sha256."""
        self.fingerprints: Table[bytes, str] = Table(size)
        """A secret's fingerprint, by the sha256 of its name and value."""


def text_key(*parts: str) -> bytes:
    """The key of ``parts`` (joined by NUL): their sha256."""
    return hashlib.sha256("\0".join(parts).encode("utf-8")).digest()
