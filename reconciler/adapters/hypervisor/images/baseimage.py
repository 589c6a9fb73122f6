"""Base images in a host's storage pool: upload once, mark when verified, never swap under overlays.

Per image the pool holds its base, named by content (``base_volume_name``:
``base-<key>-<sha256[:12]>.<format>``; ``base-<key>.<format>`` for an image
without a pinned sha256) and, once an upload is verified, the marker volume
``<base>.sha256``: a tiny raw volume whose content is one ``sha256sum`` line
(``<hex>  <base>``), so an operator can run ``sha256sum -c`` in the pool
directory. The marker is written last and removed first, so its presence means
a complete, verified base. A new sha256 for a key names a new base: the old one
stays under its overlays until ``remove_unused_base`` takes it away.

- Marker present and equal to the wanted checksum: nothing to do (read-only).
- Missing or different marker: the base is uploaded again, unless an overlay
  in the pool still has it as backing store (PermanentError "base image in
  use by N overlays"). With content names this happens only to an image
  without a pinned sha256 whose download changed.
- An upload counts the bytes and hashes them while streaming; a short read,
  a checksum mismatch or a failed stream deletes the half-written volume. If
  the link died, the volume stays without a marker and the next attempt
  replaces it; nothing ever builds an overlay on a base without its marker.
- A create reads the marker and the base's path once, then trusts them for the
  next creates on the host for ``VERIFIED_FOR`` seconds (``verified_path``).
  Deleting the base or its marker through this object (as replacing or
  removing them does) forgets them at once; a change made on the host by
  anyone else is seen when the window ends.

The pool's volumes themselves (look up, create, write, read, delete) are ``volumes``'s;
``BaseImages`` is those plus the base and marker rules above.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from reconciler.adapters.hypervisor.images.uploadstream import CHUNK, stream_up
from reconciler.adapters.hypervisor.images.volumes import Volumes, xml_of
from reconciler.adapters.hypervisor.transport.libvirtrpc import LibvirtSession
from reconciler.core.render.domainxml import plain_volume_xml
from reconciler.errors import NotFoundError, PermanentError, TransientError
from reconciler.model import Image
from reconciler.model.vm import (
    MARKER_SUFFIX,
    base_marker_name,
    base_volume_name,
    is_base_volume,
)

log = logging.getLogger("reconciler.image")

FileOpener = Callable[[Path], IO[bytes]]

VERIFIED_FOR = 60.0
"""Seconds a base found complete (its marker present, recording the wanted sha256) is
trusted for the next creates on the host without reading the marker again: the four
calls and a stream of that read were a fifth of a create's calls."""


def marker_name(image: Image) -> str:
    return base_marker_name(base_volume_name(image))


def marker_line(sha256: str, image: Image) -> bytes:
    return f"{sha256}  {base_volume_name(image)}\n".encode("ascii")


def parse_marker(content: bytes) -> str | None:
    """The checksum recorded in a marker, None when it is not a complete line."""
    text = content.decode("ascii", "replace")
    if not text.endswith("\n"):
        return None
    digest = text.split(" ", 1)[0]
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        return None
    return digest


class _Sha256Cache:
    """sha256 of local files, remembered per (path, size, mtime) for images without a pinned sum."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._known: dict[tuple[str, int, int], str] = {}

    def __call__(self, path: Path, opener: FileOpener) -> str:
        st = path.stat()
        key = (str(path), st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._known:
                return self._known[key]
        digest = hashlib.sha256()
        with opener(path) as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
        with self._lock:
            self._known[key] = digest.hexdigest()
        return digest.hexdigest()


local_sha256 = _Sha256Cache()


class BaseImages(Volumes):
    """The base-image half of the host adapter: the pool's volumes (``Volumes``) and, over
    them, each image's base and marker."""

    def __init__(self, session: LibvirtSession, *, opener: FileOpener | None = None) -> None:
        super().__init__(session)
        self._open: FileOpener = opener or (lambda path: path.open("rb"))
        self._lock = threading.Lock()
        self._verified: dict[str, tuple[str, str, float]] = {}
        """Base name -> (recorded sha256, path, monotonic time the marker was read)."""
        self._forgotten = 0
        """Bumped by ``_forget``: a read that a forget overtook is not remembered."""

    def marker(self, pool: Any, image: Image) -> str | None:
        """The checksum the pool's marker records, None when absent or incomplete."""
        name = marker_name(image)
        volume = self.volume(pool, name)
        if volume is None:
            return None
        content = self.download(volume, name, limit=4096)
        return parse_marker(content)

    def verified(self, pool: Any, image: Image, *, expected: str | None = None) -> tuple[Any, str]:
        """The base volume and its checksum, only if its marker is there (and matches)."""
        name = base_volume_name(image)
        recorded = self.marker(pool, image)
        base = self.volume(pool, name) if recorded else None
        if recorded is None or base is None:
            raise PermanentError(
                f"base image {name} is not uploaded and verified in pool "
                f"{self._session.host.pool}; the image must be ensured first",
                host=self._host,
            )
        if expected is not None and recorded != expected:
            raise PermanentError(
                f"base image {name} holds sha256 {recorded}, not {expected}; "
                "the image must be ensured first",
                host=self._host,
            )
        return base, recorded

    def verified_path(self, pool: Any, image: Image, *, expected: str | None = None) -> str:
        """The path of ``image``'s base for a new overlay, only if its marker is there (and
        matches): ``verified``, remembered for ``VERIFIED_FOR`` seconds (see the module)."""
        name = base_volume_name(image)
        read_at = time.monotonic()
        with self._lock:
            known = self._verified.get(name)
            forgotten = self._forgotten
        if known is not None:
            recorded, path, at = known
            if read_at - at < VERIFIED_FOR and (expected is None or recorded == expected):
                return path
        base, recorded = self.verified(pool, image, expected=expected)
        path = self.path(base, name)
        with self._lock:
            if self._forgotten == forgotten:
                self._verified[name] = (recorded, path, read_at)
        return path

    def _forget(self, name: str) -> None:
        """Drop what ``verified_path`` remembers of the base ``name`` is, or marks (a seed's
        or an overlay's name changes nothing)."""
        base = name.removesuffix(MARKER_SUFFIX)
        if not is_base_volume(base):
            return
        with self._lock:
            self._forgotten += 1
            self._verified.pop(base, None)

    def ensure(self, image: Image, local_file: Path) -> None:
        wanted = image.sha256 or local_sha256(local_file, self._open)
        pool = self.pool()
        name = base_volume_name(image)
        recorded = self.marker(pool, image)
        base = self.volume(pool, name)
        if recorded == wanted and base is not None:
            log.debug("host %s: base image %s is current (sha256 %s)", self._host, name, wanted)
            return
        if base is not None:
            users = self.overlays_of(pool, self.path(base, name))
            if users:
                raise PermanentError(
                    f"base image in use by {len(users)} overlays ({', '.join(users)}): "
                    f"cannot replace {name} (sha256 {recorded or 'unverified'}) with {wanted}",
                    host=self._host,
                )
        self.delete_volume(pool, marker_name(image))
        if base is not None:
            log.info("host %s: replacing base image %s (had %s)", self._host, name, recorded)
            self.delete_volume(pool, name)
        self._upload_base(pool, image, local_file, wanted)
        self.write(pool, marker_name(image), marker_line(wanted, image))

    def overlays_of(self, pool: Any, base_path: str) -> list[str]:
        """Names of the pool's volumes whose backing store is ``base_path``."""
        self._session.call("virStoragePoolRefresh", lambda _c: pool.refresh(0))
        volumes = self._session.call(
            "virStoragePoolListAllVolumes", lambda _c: pool.listAllVolumes(0)
        )
        users = []
        for volume in volumes:
            name = volume.name()
            try:
                xml = self._session.call("virStorageVolGetXMLDesc", xml_of(volume), volume=name)
            except NotFoundError:
                continue
            self._session.trace("virStorageVolGetXMLDesc", "volume XML", xml, volume=name)
            backing = ET.fromstring(xml).findtext("backingStore/path")
            if backing is not None and os.path.normpath(backing) == os.path.normpath(base_path):
                users.append(name)
        return sorted(users)

    def _upload_base(self, pool: Any, image: Image, local_file: Path, wanted: str) -> None:
        name = base_volume_name(image)
        try:
            size = local_file.stat().st_size
        except OSError as exc:
            raise PermanentError(
                f"local image file {local_file} is unusable: {exc}", host=self._host
            ) from exc
        xml = plain_volume_xml(name, capacity_bytes=size, fmt="raw")
        self._session.trace("virStorageVolCreateXML", "volume XML", xml, volume=name)
        volume = self._session.call(
            "virStorageVolCreateXML", lambda _c: pool.createXML(xml, 0), volume=name
        )
        try:
            with self._open(local_file) as fh:
                sent = stream_up(self._session, volume, name, fh, size=size, wanted=wanted)
        except OSError as exc:
            self.discard(pool, name)
            raise TransientError(
                f"reading local image {local_file} failed during upload: {exc}", host=self._host
            ) from exc
        except BaseException:
            self.discard(pool, name)
            raise
        log.info("host %s: uploaded %s, %.1f MB sha256 %s", self._host, name, sent / 1e6, wanted)
