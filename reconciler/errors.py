"""The exception tree of proxyfleet.

Every failure that crosses a module boundary is one of these, classified once,
where the outside world is met (an adapter), and never re-classified above it::

    ProxyfleetError
    ├── InvalidInput            bad YAML, schema or semantic error; carries Problems
    ├── ConfigError             the daemon's own config is unusable
    ├── SourceError             the fleet repo cannot be fetched or its head is refused
    ├── CoordinationError       the coordination service (the fleet lock's backend) cannot
    │                           be used: unreachable, no quorum, bad URL
    ├── ControlError            the running daemon cannot be asked over its control socket:
    │                           none listens, the caller is refused, the answer is broken
    ├── DecryptError            a secret of the fleet repo does not decrypt with the
    │                           box's age identity (wrong recipient, damaged file);
    │                           becomes a Problem naming the file that refers to it
    └── HostError               anything that went wrong talking to a hypervisor
        ├── TransientError      retry with backoff: link down, timeout, busy
        ├── PermanentError      report and stop retrying: bad key, refused host key,
        │   │                   unsupported XML, wrong checksum
        │   └── FencedError     a mutating call refused before it was made: this process
        │                       no longer holds the fleet lock
        └── NotFoundError       the object asked for does not exist

Callers decide what to do from the class alone: the executor retries
`TransientError`, records `PermanentError` on the proxy, and treats
`NotFoundError` as "already gone" where that is the goal (deletes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with the operator's input, pinned to file, line and field.

    ``line`` and ``column`` are 1-based; 0 means "the file as a whole".
    ``field`` is a dotted path such as ``spec.placement.zone`` ('' for the
    document itself).
    """

    file: str
    line: int
    column: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        if self.field:
            return f"{where}: {self.field}: {self.message}"
        return f"{where}: {self.message}"


class ProxyfleetError(Exception):
    """Base of every error proxyfleet raises on purpose."""


class InvalidInput(ProxyfleetError):
    """The fleet repo (or an inventory file) is broken; nothing may act on it."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems: tuple[Problem, ...] = tuple(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


class ConfigError(ProxyfleetError):
    """The daemon's configuration file cannot be used."""


class MissingDependency(ConfigError):
    """An optional part of proxyfleet this command needs is not installed (the message names
    the extra that brings it)."""


class ControlError(ProxyfleetError):
    """The daemon's control socket (``proxyfleet reconcile``/``get``/``info``) cannot be used."""


class HostError(ProxyfleetError):
    """A hypervisor call failed. ``host`` names the host, ``rpc`` the call.

    ``code`` and ``code_name`` carry the libvirt error code (e.g. 42,
    ``VIR_ERR_NO_DOMAIN``) when the failure came from libvirt.
    """

    def __init__(
        self,
        message: str,
        *,
        host: str = "",
        rpc: str = "",
        code: int | None = None,
        code_name: str | None = None,
    ) -> None:
        self.host = host
        self.rpc = rpc
        self.code = code
        self.code_name = code_name
        super().__init__(message)

    def __str__(self) -> str:
        parts = []
        if self.host:
            parts.append(f"host {self.host}")
        if self.rpc:
            parts.append(self.rpc)
        prefix = ": ".join(parts)
        text = super().__str__()
        if self.code_name:
            text = f"{text} ({self.code_name})"
        return f"{prefix}: {text}" if prefix else text


class TransientError(HostError):
    """Worth retrying: the link, the daemon or the resource may come back."""


class PermanentError(HostError):
    """Retrying will not help until someone changes something."""


class FencedError(PermanentError):
    """A mutating host call was not made: the fleet lock is no longer ours (fencing).

    Permanent for this run: another actor may lead the fleet now, and only a
    later run that holds the lock again may act.
    """


class NotFoundError(HostError):
    """The domain, volume or pool asked for does not exist."""


class SourceError(ProxyfleetError):
    """The fleet repo cannot be used: never fetched, or its head refused (verifyCommits).

    ``revision`` names the refused commit when one is known.
    """

    def __init__(self, message: str, *, revision: str = "") -> None:
        self.revision = revision
        super().__init__(message)


class CoordinationError(ProxyfleetError):
    """The coordination service behind the fleet lock cannot be used right now.

    Raised by the lock adapter for an unreachable backend, a cluster without
    quorum or a URL no driver understands; never for "someone else holds it",
    which is an answer, not an error.
    """


class DecryptError(ProxyfleetError):
    """A secret's ciphertext does not decrypt with the age identity of this box.

    The message says why in age's words (no matching identity, a damaged
    header) and never carries plaintext: there is none.
    """
