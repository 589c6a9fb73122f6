"""The daemon's local image cache: each base image downloaded once, verified.

An image is streamed into a temporary file inside the cache directory while
its sha256 is computed; only a complete download whose checksum matches the
configured one (when there is one) is renamed into place, atomically, under a
name derived from its URL. A sidecar ``<name>.sha256.json`` records the
checksum, size and mtime so that a later run reuses the file without hashing
it again (cheap for images without a configured sha256, too).

URLs: ``https://``; ``file://`` for air-gapped boxes, only below a directory
the daemon config allow-lists (``images.allowFileDirs``: the repo names the
URL, so without that list a committer could have any file of the management
box, a secret or ``/dev/zero``, uploaded to every pool); ``http://`` only to
loopback (the lab's local server). Redirects obey the same rule and never lead
to ``file://``. A file must be a regular file once every link is resolved.

``size`` tells an image's size without downloading it (placement counts a
base a host lacks): the cached copy's, a ``file://`` image's, or the
Content-Length of one HEAD request; None when none of them tells.

Every download is capped at ``max_bytes``: a larger Content-Length is refused
before the first byte, a body that grows past it is cut off.

Errors, classified here once: network trouble, 5xx/408/429 and a truncated
body are transient; a checksum mismatch, 4xx, a missing local file, a refused
URL, an image over the cap, a full disk under the cache or a bad TLS
certificate are permanent. A failure never leaves a file the next run could
mistake for a good image.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import http.client
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from reconciler import progress
from reconciler.adapters.hypervisor.images.imageurls import (
    check_url,
    network_error,
    open_source,
    redact,
    source_length,
)
from reconciler.errors import HostError, PermanentError, TransientError
from reconciler.model.fleet import Image
from reconciler.progress import ProgressEvent

log = logging.getLogger(__name__)

_PARTIAL_PREFIX = ".partial-"
# A partial file untouched this long was left by a process that died mid-download.
_STALE_PARTIAL_SECONDS = 6 * 3600
HEAD_TIMEOUT = 10.0
"""Seconds a HEAD request for an image's size may take: it runs before planning."""
DEFAULT_MAX_BYTES = 16 * 1024**3
"""Bytes: the largest image the cache downloads (16 GiB; cloud images are under 1 GiB)."""


@dataclass(frozen=True, slots=True)
class CachedImage:
    """A verified file in the cache. ``sha256`` is what was computed, lower-case hex."""

    path: Path
    sha256: str
    size: int


class ImageCache:
    """Downloads images into ``root`` once and hands out verified local paths.

    Thread-safe: concurrent fetches of one URL share a lock, so the second
    caller waits for and reuses the first one's download.
    """

    def __init__(
        self,
        root: Path,
        *,
        timeout: float = 30.0,
        progress_interval: float = 5.0,
        chunk_size: int = 1 << 20,
        clock: Callable[[], float] = time.monotonic,
        allowed_file_dirs: Sequence[Path] = (),
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        """``timeout``: seconds any single connect or read may block.
        ``progress_interval``: seconds between progress lines at info.
        ``allowed_file_dirs``: directories ``file://`` URLs may point into (none: no file URL).
        ``max_bytes``: the largest image downloaded.
        """
        self.root = root
        self._allowed = tuple(allowed_file_dirs)
        self._max_bytes = max_bytes
        self._timeout = timeout
        self._progress_interval = progress_interval
        self._chunk_size = chunk_size
        self._clock = clock
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def path_for(self, image: Image) -> Path:
        """Where ``image`` lives in the cache once fetched (named by URL hash)."""
        return self.root / cache_name(image)

    def fetch(self, image: Image) -> CachedImage:
        """The verified local copy of ``image``, downloading it if needed."""
        check_url(image.url, allowed_file_dirs=self._allowed)
        final = self.path_for(image)
        with self._lock(final.name):
            cached = self._reuse(image, final)
            if cached is not None:
                return cached
            self._sweep_partials()
            return self._download(image, final)

    def size(self, image: Image) -> int | None:
        """Bytes of ``image`` without downloading it; None when that cannot be told.

        Cost: a stat and a sidecar read when the cache holds a verified copy
        (the exact size); otherwise a stat for a ``file://`` URL, or one HEAD
        request (``HEAD_TIMEOUT`` at most) whose Content-Length is taken as told.
        """
        final = self.path_for(image)
        try:
            check_url(image.url, allowed_file_dirs=self._allowed)
            stat = final.stat()
        except PermanentError as exc:
            log.info("Image %s: size not known: %s", image.key, exc)
            return None
        except OSError:
            pass
        else:
            sidecar = _sidecar(final)
            sha = _read_sidecar(
                sidecar, url=image.url, size=stat.st_size, mtime_ns=stat.st_mtime_ns
            )
            expected = _expected(image)
            if sha is not None and (expected is None or sha == expected):
                return stat.st_size
        try:
            return source_length(
                image, timeout=min(self._timeout, HEAD_TIMEOUT), allowed=self._allowed
            )
        except HostError as exc:
            log.info("Image %s: size not known before the download: %s", image.key, exc)
            return None

    def _sweep_partials(self) -> None:
        """Remove partial downloads a crashed process left behind (by age)."""
        cutoff = time.time() - _STALE_PARTIAL_SECONDS
        with contextlib.suppress(OSError):
            for leftover in self.root.glob(_PARTIAL_PREFIX + "*"):
                with contextlib.suppress(OSError):
                    if leftover.stat().st_mtime < cutoff:
                        leftover.unlink()
                        log.info("Image cache: removed stale partial download %s.", leftover)

    def _lock(self, name: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(name, threading.Lock())

    # -- reuse -----------------------------------------------------------------

    def _reuse(self, image: Image, final: Path) -> CachedImage | None:
        try:
            stat = final.stat()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise PermanentError(f"image {image.key}: cannot read cache {final}: {exc}") from exc
        sidecar = _sidecar(final)
        sha = _read_sidecar(sidecar, url=image.url, size=stat.st_size, mtime_ns=stat.st_mtime_ns)
        if sha is None:
            log.info("Image %s: hashing the cached copy %s (no valid sidecar).", image.key, final)
            sha = _hash_file(final)
            self._write_sidecar(final, url=image.url, sha256=sha)
        expected = _expected(image)
        if expected is not None and sha != expected:
            log.info(
                "Image %s: cached copy has sha256 %s, configured %s; downloading again.",
                image.key,
                sha,
                expected,
            )
            return None
        log.debug("Image %s: reusing %s (sha256 %s).", image.key, final, sha)
        return CachedImage(path=final, sha256=sha, size=stat.st_size)

    # -- download --------------------------------------------------------------

    def _download(self, image: Image, final: Path) -> CachedImage:
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            fd, name = tempfile.mkstemp(dir=self.root, prefix=_PARTIAL_PREFIX, suffix=final.suffix)
        except OSError as exc:
            raise _local_error(image, self.root, exc) from exc
        partial = Path(name)
        try:
            with os.fdopen(fd, "wb") as out:
                sha, size = self._stream(image, out, partial)
                out.flush()
                os.fsync(out.fileno())
            expected = _expected(image)
            if expected is not None and sha != expected:
                raise PermanentError(
                    f"image {image.key}: sha256 mismatch for {redact(image.url)}: "
                    f"expected {expected}, got {sha}"
                )
            os.replace(partial, final)
        except OSError as exc:
            raise _local_error(image, partial, exc) from exc
        finally:
            with contextlib.suppress(FileNotFoundError):
                partial.unlink()
        self._write_sidecar(final, url=image.url, sha256=sha)
        return CachedImage(path=final, sha256=sha, size=size)

    def _stream(self, image: Image, out: IO[bytes], partial: Path) -> tuple[str, int]:
        hasher = hashlib.sha256()
        size = 0
        started = last = self._clock()
        log.info("Image %s: downloading %s.", image.key, redact(image.url))
        with open_source(image, timeout=self._timeout, allowed=self._allowed) as (source, length):
            _log_progress(image, 0, length, 0.0)
            if length is not None and length > self._max_bytes:
                raise PermanentError(
                    f"image {image.key}: {redact(image.url)} is {length} bytes, "
                    f"over the limit of {self._max_bytes} (images.maxBytes)"
                )
            for chunk in _chunks(image, source, self._chunk_size):
                if size + len(chunk) > self._max_bytes:
                    raise PermanentError(
                        f"image {image.key}: {redact(image.url)} grew past the limit of "
                        f"{self._max_bytes} bytes (images.maxBytes); download stopped"
                    )
                try:
                    out.write(chunk)
                except OSError as exc:
                    raise _local_error(image, partial, exc) from exc
                hasher.update(chunk)
                size += len(chunk)
                now = self._clock()
                if now - last >= self._progress_interval:
                    last = now
                    _log_progress(image, size, length, now - started)
        if length is not None and size != length:
            raise TransientError(
                f"image {image.key}: download truncated at {size} of {length} bytes"
            )
        elapsed = self._clock() - started
        progress.emit(
            _event(image, size, length, finished=True),
            "Image %s: downloaded %d bytes in %.1f s (%.1f MB/s), sha256 %s.",
            image.key,
            size,
            elapsed,
            _rate(size, elapsed),
            hasher.hexdigest(),
        )
        return hasher.hexdigest(), size

    def _write_sidecar(self, final: Path, *, url: str, sha256: str) -> None:
        """Atomically record what was verified; a failure only costs a re-hash later."""
        try:
            stat = final.stat()
            record = {
                "url": url,
                "sha256": sha256,
                "size": stat.st_size,
                "mtime_ns": stat.st_mtime_ns,
            }
            sidecar = _sidecar(final)
            temporary = sidecar.with_name(_PARTIAL_PREFIX + sidecar.name)
            temporary.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
            os.replace(temporary, sidecar)
        except OSError as exc:
            log.warning("Image cache: cannot write the sidecar of %s: %s", final, exc)


def cache_name(image: Image) -> str:
    """The file name of ``image`` in a cache: its URL's hash, its format."""
    digest = hashlib.sha256(image.url.encode("utf-8")).hexdigest()[:32]
    return f"{digest}.{image.format.value}"


def _chunks(image: Image, source: IO[bytes], chunk_size: int) -> Iterator[bytes]:
    while True:
        try:
            chunk = source.read(chunk_size)
        except (OSError, http.client.HTTPException) as exc:
            raise network_error(image, exc) from exc
        if not chunk:
            return
        yield chunk


def _local_error(image: Image, path: Path, exc: OSError) -> HostError:
    """Writing the cache failed. A full disk is permanent: retrying only fills it again
    (and whatever else lives there) until someone frees space or raises the quota."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return PermanentError(
            f"image {image.key}: the disk under the image cache {path.parent} is full "
            f"({exc.strerror}); free space or lower the image's size"
        )
    return PermanentError(f"image {image.key}: cannot write {path}: {exc}")


def _expected(image: Image) -> str | None:
    return image.sha256.strip().lower() if image.sha256 else None


def _sidecar(final: Path) -> Path:
    return final.with_name(final.name + ".sha256.json")


def _read_sidecar(sidecar: Path, *, url: str, size: int, mtime_ns: int) -> str | None:
    """The recorded sha256 if the sidecar still describes this very file."""
    try:
        record = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict):
        return None
    sha = record.get("sha256")
    fresh = (
        record.get("url") == url
        and record.get("size") == size
        and record.get("mtime_ns") == mtime_ns
    )
    if fresh and isinstance(sha, str) and len(sha) == 64:
        return sha
    return None


def _hash_file(path: Path) -> str:
    hasher = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def _rate(size: int, elapsed: float) -> float:
    return size / 1e6 / elapsed if elapsed > 0 else 0.0


def _event(image: Image, size: int, length: int | None, *, finished: bool = False) -> ProgressEvent:
    return ProgressEvent(
        task=f"download {image.key}",
        description=f"download {image.key}",
        done=size,
        total=length if length is not None else (size if finished else None),
        unit="bytes",
        finished=finished,
    )


def _log_progress(image: Image, size: int, length: int | None, elapsed: float) -> None:
    total = f" of {length / 1048576:.1f}" if length else ""
    progress.emit(
        _event(image, size, length),
        "Image %s: %.1f%s MiB downloaded, %.1f MB/s.",
        image.key,
        size / 1048576,
        total,
        _rate(size, elapsed),
    )
