"""The coordination URL as tooz's drivers need it (reconciler.adapters.coordination.toozlock).

No tooz here: checking and completing a URL needs none of it.
"""

from __future__ import annotations

import urllib.parse

from reconciler.errors import CoordinationError

SCHEMES = ("file", "etcd3+http", "etcd3+https", "zookeeper")
"""The coordination URL schemes proxyfleet accepts (tooz knows more; these are documented)."""

FILE_RECORD_SECONDS = 10**9
"""How long the file driver counts a holder record nobody touches: for ever (~31 years)."""


def driver_url(url: str, ttl: float) -> str:
    """``url`` with the timeouts tooz's driver needs for ``ttl`` (values in the URL win).

    etcd: ``lock_timeout`` and ``membership_timeout`` (lease TTLs) are ``ttl``,
    ``timeout`` (one HTTP request) is a sixth of it so that a renewal that
    hangs gives up long before the lease could run out.
    ZooKeeper: ``timeout`` is the session timeout, ``ttl``.
    file: ``timeout`` (how long an untouched member record counts) is for ever; group
    calls run inline (``executor=synchronous``; the driver serializes them itself).
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise CoordinationError(
            f"coordination URL {url!r}: scheme must be one of {', '.join(SCHEMES)}"
        )
    options = dict(urllib.parse.parse_qsl(parts.query))
    seconds = str(max(1, int(ttl)))
    if parts.scheme.startswith("etcd3"):
        options.setdefault("lock_timeout", seconds)
        options.setdefault("membership_timeout", seconds)
        options.setdefault("timeout", str(max(1, int(ttl / 6))))
    elif parts.scheme == "zookeeper":
        options.setdefault("timeout", seconds)
    else:
        # The file driver (tooz >= 9) stops counting a group member whose file was not
        # touched for ``timeout`` seconds (default 10); the lock's holder record is never
        # touched (a flock needs no renewal), so without this it vanished 10 s after the
        # lock was taken and refusals named nobody. Dead holders are told apart by pid.
        options.setdefault("timeout", str(FILE_RECORD_SECONDS))
        options.setdefault("executor", "synchronous")  # a pool's stop waited ~1 s
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(options)))
