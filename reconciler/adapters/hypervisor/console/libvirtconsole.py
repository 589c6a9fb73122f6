"""A VM's serial console through the host's libvirt connection (``virsh console``'s way).

``open_console`` looks the domain up and calls ``virDomainOpenConsole`` with a
blocking ``virStream`` on the session's connection: the same SSH-forwarded
libvirt socket every other call of the host adapter uses, so the console
needs nothing on the hypervisor beyond sshd and libvirt. Opening is one RPC
under the session's call deadline; the stream then lives as long as the
operator stays attached, outside any deadline. Reading and writing may run on
two threads at once (libvirt's client is thread-safe).

Without ``force``, a console another client holds is refused by libvirt
("Active console session exists"), as ``virsh console`` without ``--force``
is; with it, the other session is closed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

import libvirt

from reconciler.adapters.hypervisor.transport.libvirterrors import classify
from reconciler.adapters.hypervisor.transport.libvirtrpc import LibvirtSession
from reconciler.errors import NotFoundError, TransientError

log = logging.getLogger(__name__)

CHUNK = 4096
"""Bytes asked for per ``virStreamRecv``: a terminal's worth, never held back."""


class LibvirtConsole:
    """One open console stream (a ConsoleStream). Made by ``open_console``."""

    def __init__(self, session: LibvirtSession, domain: str, stream: Any) -> None:
        self._session = session
        self._domain = domain
        self._stream = stream
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._aborted = False

    def read(self) -> bytes:
        if self._closed.is_set():
            return b""
        try:
            data = self._stream.recv(CHUNK)
        except libvirt.libvirtError as exc:
            if not self._closed.is_set():
                log.info("The console of %s closed: %s", self._domain, exc.get_error_message())
            self._closed.set()
            return b""
        if isinstance(data, int) or not data:  # -2 would be EAGAIN: never for a blocking stream
            self._closed.set()
            return b""
        return bytes(data)

    def write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            if self._closed.is_set():
                raise TransientError(
                    f"the console of {self._domain} is closed",
                    host=self._session.host.name,
                    rpc="virStreamSend",
                )
            try:
                sent = self._stream.send(bytes(view))
            except libvirt.libvirtError as exc:
                self._closed.set()
                raise classify(
                    exc, host=self._session.host.name, rpc="virStreamSend", link_alive=False
                ) from exc
            if sent <= 0:
                self._closed.set()
                continue
            view = view[sent:]

    def close(self) -> None:
        with self._lock:
            if self._aborted:
                return
            self._aborted = True
        self._closed.set()
        try:
            self._stream.abort()  # a recv blocked in another thread returns now
        except libvirt.libvirtError as exc:
            log.debug("Aborting the console stream of %s: %s", self._domain, exc)


def open_console(session: LibvirtSession, domain: str, *, force: bool = False) -> LibvirtConsole:
    """Attach to ``domain``'s first serial console. Raises NotFoundError for a domain the
    host does not have, PermanentError when libvirt refuses (a console already in use
    without ``force``, no console device), TransientError when the link fails."""
    flags = libvirt.VIR_DOMAIN_CONSOLE_FORCE if force else 0

    def attach(conn: Any) -> Any:
        dom = conn.lookupByName(domain)
        stream = conn.newStream(0)
        try:
            dom.openConsole(None, stream, flags)
        except libvirt.libvirtError:
            with contextlib.suppress(libvirt.libvirtError):
                stream.abort()
            raise
        return stream

    try:
        stream = session.call("virDomainOpenConsole", attach, domain=domain)
    except NotFoundError as exc:
        raise NotFoundError(
            f"no domain {domain} on host {session.host.name}", host=session.host.name, rpc=exc.rpc
        ) from exc
    return LibvirtConsole(session, domain, stream)
