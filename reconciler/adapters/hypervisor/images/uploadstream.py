"""The upload stream of a base image: counted, hashed beside the send, deadline re-armed.

``stream_up`` sends a local file into a new volume through ``virStorageVolUpload``.
sha256 runs on a thread of its own over the very chunks the stream sends; a short
read or a checksum mismatch aborts the stream before it is finished, so libvirt
never keeps a volume whose bytes were not verified. Progress is logged every
``PROGRESS_SECONDS``.
"""

from __future__ import annotations

import hashlib
import logging
import queue
import threading
import time
from typing import IO, Any

import libvirt

from reconciler.adapters.hypervisor.transport.deadline import Deadline
from reconciler.adapters.hypervisor.transport.libvirtrpc import LibvirtSession
from reconciler.errors import PermanentError, TransientError
from reconciler.progress import ProgressEvent
from reconciler.progress import emit as emit_progress

log = logging.getLogger("reconciler.image")

CHUNK = 128 * 1024
"""Read and send size of an upload: each chunk is one stream message, which libvirtd
writes to the volume with one ``write()``. With 256 KiB (libvirt's own stream buffer size)
and three hosts uploading at once, libvirtd's copies into the page cache took over half of
the machine's CPU and the upload ran at 0.45x of three scp; with 128 KiB, 0.91x, and the
one-host upload did not lose (1.19x against 1.12x). Larger messages (1 MiB) cost both
sides page faults for every fresh buffer (docs/performance.md, rows 3 and 3b)."""
PROGRESS_SECONDS = 5.0
HASH_QUEUE = 16


def stream_up(
    session: LibvirtSession, volume: Any, name: str, fh: IO[bytes], *, size: int, wanted: str
) -> int:
    """Upload exactly ``size`` bytes of ``fh``; verify count and checksum before finishing.

    The chunks sent are hashed by a thread of their own (the very bytes objects the stream
    sends, which cannot change), so sha256 runs on the second core beside the send
    instead of between the sends.
    """
    hasher = Hasher()
    progress = UploadLog(session.host.name, name, size)
    try:
        with session.rpc("virStorageVolUpload", volume=name, bytes=size) as (
            conn,
            deadline,
        ):
            stream = conn.newStream(0)
            volume.upload(stream, 0, size, 0)
            stream.sendAll(Reader(fh, hasher, progress, deadline), None)
            sha256 = hasher.hexdigest()
            short = progress.sent != size
            if short or sha256 != wanted:
                abort_quietly(stream)
                what = (
                    f"{progress.sent} of {size} bytes (local file changed while uploading)"
                    if short
                    else f"sha256 {sha256}, expected {wanted}"
                )
                raise PermanentError(f"upload of {name} rejected: {what}", host=session.host.name)
            stream.finish()
    finally:
        hasher.stop()
    _check_size(session, volume, name, size)
    progress.done()
    return progress.sent


def _check_size(session: LibvirtSession, volume: Any, name: str, size: int) -> None:
    """The volume on the host holds exactly ``size`` bytes (a finished stream may still lie)."""
    info = session.call(
        "virStorageVolGetInfoFlags",
        lambda _c: volume.infoFlags(libvirt.VIR_STORAGE_VOL_GET_PHYSICAL),
        volume=name,
    )
    if info[2] != size:
        raise TransientError(
            f"uploaded {name} is {info[2]} bytes on the host, expected {size}",
            host=session.host.name,
        )


def abort_quietly(stream: Any) -> None:
    try:
        stream.abort()
    except libvirt.libvirtError as exc:
        log.debug("aborting an upload stream failed: %s", exc)


class UploadLog:
    def __init__(self, host: str, name: str, size: int) -> None:
        self.host, self.name, self.size = host, name, size
        self.sent = 0
        self.started = self.last = time.monotonic()
        self._log("uploading")

    def add(self, count: int) -> None:
        self.sent += count
        now = time.monotonic()
        if now - self.last >= PROGRESS_SECONDS:
            self.last = now
            self._log("uploading")

    def done(self) -> None:
        self._log("uploaded")

    def _log(self, verb: str) -> None:
        seconds = max(time.monotonic() - self.started, 1e-6)
        percent = 100.0 * self.sent / self.size if self.size else 100.0
        event = ProgressEvent(
            task=f"upload {self.host} {self.name}",
            description=f"upload {self.name} to {self.host}",
            done=self.sent,
            total=self.size,
            unit="bytes",
            finished=verb == "uploaded",
        )
        emit_progress(
            event,
            "host %s: %s %s: %.1f of %.1f MB (%.0f%%) at %.1f MB/s",
            self.host,
            verb,
            self.name,
            self.sent / 1e6,
            self.size / 1e6,
            percent,
            self.sent / 1e6 / seconds,
        )


class Hasher:
    """sha256 of the chunks handed to ``feed``, computed by a thread of its own.

    hashlib releases the GIL for large updates, so hashing overlaps with the stream's send.
    At most ``HASH_QUEUE`` chunks wait; ``feed`` blocks beyond that.
    """

    def __init__(self) -> None:
        self._digest = hashlib.sha256()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=HASH_QUEUE)
        self._thread = threading.Thread(target=self._run, name="upload-sha256", daemon=True)
        self._thread.start()

    def feed(self, chunk: bytes) -> None:
        self._queue.put(chunk)

    def hexdigest(self) -> str:
        """The checksum of everything fed so far; waits for the thread to finish hashing."""
        self.stop()
        return self._digest.hexdigest()

    def stop(self) -> None:
        """End the thread (after the chunks already fed). Idempotent."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        while (chunk := self._queue.get()) is not None:
            self._digest.update(chunk)


class Reader:
    """sendAll's handler: reads, hands to the hasher, counts and re-arms the deadline per chunk."""

    def __init__(
        self, fh: IO[bytes], hasher: Hasher, progress: UploadLog, deadline: Deadline
    ) -> None:
        self._fh, self._hasher, self._progress, self._deadline = fh, hasher, progress, deadline

    def __call__(self, _stream: Any, nbytes: int, _opaque: object) -> bytes:
        remaining = self._progress.size - self._progress.sent
        chunk = self._fh.read(min(max(nbytes, CHUNK), remaining)) if remaining > 0 else b""
        if chunk:
            self._hasher.feed(chunk)
        self._progress.add(len(chunk))
        self._deadline.arm()
        return chunk
