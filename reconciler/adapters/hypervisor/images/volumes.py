"""The volumes of a host's storage pool: looked up, created, written, read, deleted.

``Volumes`` is what the other image modules build on (``baseimage``: base images and
their markers; ``unusedvolumes``: what nothing uses any more), over one
``LibvirtSession``: every call goes through ``session.call`` / ``session.rpc`` (deadline,
trace, errors classified). A volume that is already there, or already gone, is an answer
(``None``, ``False``), never an error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import libvirt

from reconciler.adapters.hypervisor.images.uploadstream import CHUNK
from reconciler.adapters.hypervisor.transport.libvirtrpc import LibvirtSession
from reconciler.core.render.domainxml import plain_volume_xml
from reconciler.errors import HostError, NotFoundError, PermanentError

log = logging.getLogger("reconciler.image")


class Volumes:
    """The pool's volumes on one host, over one ``LibvirtSession``."""

    def __init__(self, session: LibvirtSession) -> None:
        self._session = session

    @property
    def _host(self) -> str:
        return self._session.host.name

    def _forget(self, name: str) -> None:
        """Called before volume ``name`` is deleted: what a subclass remembers of it is stale."""

    def pool(self) -> Any:
        name = self._session.host.pool
        try:
            return self._session.call(
                "virStoragePoolLookupByName", lambda c: c.storagePoolLookupByName(name), pool=name
            )
        except PermanentError as exc:
            if exc.code == libvirt.VIR_ERR_NO_STORAGE_POOL:
                raise PermanentError(
                    f"storage pool {name!r} does not exist on the host", host=self._host
                ) from exc
            raise

    def volume(self, pool: Any, name: str) -> Any | None:
        """The volume or None; any other failure raises."""
        try:
            return self._session.call(
                "virStorageVolLookupByName",
                lambda _c: pool.storageVolLookupByName(name),
                volume=name,
            )
        except NotFoundError:
            return None

    def path(self, volume: Any, name: str) -> str:
        path: str = self._session.call(
            "virStorageVolGetPath", lambda _c: volume.path(), volume=name
        )
        return path

    def file_path(self, volume: Any, name: str) -> str:
        """The path of a volume a new domain's disk points at, from the volume object's key
        when that is a file path ending in ``name`` (a directory pool's key is the volume's
        path, known without an RPC), else asked (``path``). Only for the disks of a create:
        a wrong path there fails the boot; what decides about deletes asks the host."""
        key = volume.key()
        if isinstance(key, str) and key.startswith("/") and key.endswith(f"/{name}"):
            return key
        return self.path(volume, name)

    def create_volume(self, pool: Any, name: str, xml: str) -> Any | None:
        """Create a volume from ``xml``; None when one of that name exists already."""
        try:
            return self._session.call(
                "virStorageVolCreateXML", lambda _c: pool.createXML(xml, 0), volume=name
            )
        except PermanentError as exc:
            if exc.code == libvirt.VIR_ERR_STORAGE_VOL_EXIST:
                return None
            raise

    def delete_volume(self, pool: Any, name: str) -> bool:
        """Delete by name; False when it was not there."""
        volume = self.volume(pool, name)
        return volume is not None and self.delete_found(volume, name)

    def delete_found(self, volume: Any, name: str) -> bool:
        """Delete a volume already looked up; False when it went meanwhile."""
        self._forget(name)
        try:
            self._session.call("virStorageVolDelete", lambda _c: volume.delete(0), volume=name)
        except NotFoundError:
            return False
        return True

    def discard(self, pool: Any, name: str) -> None:
        """Delete a half-written volume; if the link is gone, its missing marker still guards it."""
        try:
            self.delete_volume(pool, name)
        except HostError as exc:
            log.warning("host %s: could not remove partial volume %s: %s", self._host, name, exc)

    def write(self, pool: Any, name: str, content: bytes) -> Any:
        """Create volume ``name`` holding exactly ``content`` (seed ISO, marker), replacing it.
        Created first; one left over of that name (a create that failed half-way) is
        deleted and the create repeated."""
        xml = plain_volume_xml(name, capacity_bytes=len(content), fmt="raw")
        volume = self.create_volume(pool, name, xml)
        if volume is None:
            self.delete_volume(pool, name)
            volume = self._session.call(
                "virStorageVolCreateXML", lambda _c: pool.createXML(xml, 0), volume=name
            )
        try:
            with self._session.rpc("virStorageVolUpload", volume=name, bytes=len(content)) as (
                conn,
                _,
            ):
                stream = conn.newStream(0)
                volume.upload(stream, 0, len(content), 0)
                offset = 0
                while offset < len(content):
                    offset += stream.send(content[offset : offset + CHUNK])
                stream.finish()
        except BaseException:
            self.discard(pool, name)
            raise
        return volume

    def download(self, volume: Any, name: str, *, limit: int) -> bytes:
        """The first ``limit`` bytes of a small volume."""
        with self._session.rpc("virStorageVolDownload", volume=name) as (conn, _):
            stream = conn.newStream(0)
            volume.download(stream, 0, limit, 0)
            chunks: list[bytes] = []
            while True:
                data = stream.recv(limit)
                if not isinstance(data, bytes) or not data:
                    break
                chunks.append(data)
            stream.finish()
        return b"".join(chunks)


def xml_of(obj: Any) -> Callable[[Any], str]:
    """A call reading ``obj``'s XML description (for use inside loops)."""

    def read(_conn: Any) -> str:
        xml: str = obj.XMLDesc(0)
        return xml

    return read
