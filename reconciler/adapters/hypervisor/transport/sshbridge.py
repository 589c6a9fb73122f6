"""``SocketBridge``: SSH channels exposed as a local unix socket that libvirt-python opens.

The socket lives in a private 0700 directory; libvirt-python opens it as
``qemu+unix:///system?socket=...``, and every connection is piped into a fresh
channel to the host's libvirtd.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import socket
import threading
from collections.abc import Callable

import paramiko

from reconciler.adapters.hypervisor.transport.sshpaths import private_socket_dir
from reconciler.errors import HostError, PermanentError

log = logging.getLogger("reconciler.ssh")

_CHUNK = 256 * 1024
_DEFAULT_PACKET = 32768


class SocketBridge:
    """A local unix socket whose every connection is piped into a fresh SSH channel.

    The socket lives in a private ``mkdtemp`` directory (mode 0700), so only
    this user can reach the hypervisor through it: under systemd's
    ``$RUNTIME_DIRECTORY`` when set, else the temp dir (``$TMPDIR``, /tmp).
    A directory that cannot be made (a read-only root without a private /tmp)
    is a PermanentError naming it, not a crash. ``prepare()`` opens the
    channel in the caller's thread, so that SSH errors surface there,
    classified, instead of as an EOF inside libvirt; a connection that
    arrives without a prepared channel opens its own. Each connection is
    pumped by two threads, one per direction.
    """

    def __init__(self, open_channel: Callable[[], paramiko.Channel], *, label: str) -> None:
        self._open_channel = open_channel
        self._label = label
        self._dir, self.path = private_socket_dir(label)
        try:
            self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._server.bind(self.path)
        except OSError as exc:
            raise PermanentError(
                f"cannot make the local libvirt socket {self.path}: {exc}; "
                "give proxyfleet a writable RuntimeDirectory or /tmp",
                host=label,
            ) from exc
        self._server.listen(8)
        # close() wakes the acceptor's select through this pair at once (closing the
        # listening socket does not wake a select on it): a process's exit does not wait
        # out the select's timeout, once per host.
        self._wake_r, self._wake_w = socket.socketpair()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._prepared: list[paramiko.Channel] = []
        self._live: set[socket.socket] = set()
        self._channels: set[paramiko.Channel] = set()
        self.stderr_tail = ""
        self._acceptor = threading.Thread(
            target=self._accept_loop, name=f"bridge-{label}", daemon=True
        )
        self._acceptor.start()

    @property
    def uri(self) -> str:
        return f"qemu+unix:///system?socket={self.path}"

    def prepare(self) -> None:
        """Open the channel the next accepted connection will use."""
        channel = self._open_channel()
        with self._lock:
            stale, self._prepared = self._prepared, [channel]
        for old in stale:
            _close_channel(old)

    def close(self) -> None:
        """Stop accepting, close every pumped connection, remove the directory. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        _send_quietly(self._wake_w)
        self._server.close()
        with self._lock:
            channels = [*self._prepared, *self._channels]
            sockets = list(self._live)
            self._prepared.clear()
        for channel in channels:
            _close_channel(channel)
        for sock in sockets:
            _close_quietly(sock)
        self._acceptor.join(timeout=2)
        for end in (self._wake_r, self._wake_w):
            _close_quietly(end)
        for leftover in (self.path, self._dir):
            try:
                (os.unlink if leftover == self.path else os.rmdir)(leftover)
            except OSError:
                log.debug("bridge cleanup: %s already gone", leftover)

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select([self._server, self._wake_r], [], [], 0.5)
                if self._wake_r in ready:
                    return
                if not ready:
                    continue
                client, _ = self._server.accept()
            except (OSError, ValueError):
                return
            self._serve(client)

    def _serve(self, client: socket.socket) -> None:
        with self._lock:
            channel = self._prepared.pop(0) if self._prepared else None
        if channel is None:
            try:
                channel = self._open_channel()
            except HostError as exc:
                log.warning("bridge %s: cannot open a channel: %s", self._label, exc)
                _close_quietly(client)
                return
        with self._lock:
            self._live.add(client)
            self._channels.add(channel)
        up = threading.Thread(
            target=self._pump_up, args=(client, channel), name=f"up-{self._label}", daemon=True
        )
        down = threading.Thread(
            target=self._pump_down, args=(client, channel), name=f"down-{self._label}", daemon=True
        )
        up.start()
        down.start()

    def _pump_up(self, client: socket.socket, channel: paramiko.Channel) -> None:
        """libvirt -> hypervisor.

        Reads into one reused buffer and hands paramiko one SSH packet's worth at a time:
        ``Channel.sendall`` of a larger buffer copies the rest of it after every packet
        (``s = s[sent:]``), which an upload paid for every 32 KiB.
        """
        buffer = bytearray(_CHUNK)
        view = memoryview(buffer)
        try:
            while True:
                count = client.recv_into(buffer)
                if not count:
                    break
                step = _packet_payload(channel)
                for start in range(0, count, step):
                    channel.sendall(bytes(view[start : min(start + step, count)]))
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            self._finish(client, channel)

    def _pump_down(self, client: socket.socket, channel: paramiko.Channel) -> None:
        """hypervisor -> libvirt; also keeps the tail of an exec channel's stderr."""
        try:
            while True:
                select.select([channel], [], [], 1.0)
                if channel.recv_stderr_ready():
                    text = channel.recv_stderr(4096).decode("utf-8", "replace")
                    self.stderr_tail = (self.stderr_tail + text)[-2000:]
                    log.warning("bridge %s: remote helper says: %s", self._label, text.strip())
                if channel.recv_ready():
                    data = channel.recv(_CHUNK)
                    if not data:
                        break
                    client.sendall(data)
                elif channel.closed or channel.eof_received:
                    break
        except (OSError, EOFError, paramiko.SSHException):
            pass
        finally:
            self._finish(client, channel)

    def _finish(self, client: socket.socket, channel: paramiko.Channel) -> None:
        _close_channel(channel)
        _close_quietly(client)
        with self._lock:
            self._live.discard(client)
            self._channels.discard(channel)


def _packet_payload(channel: paramiko.Channel) -> int:
    """The data paramiko puts into one packet of ``channel`` (its ``_wait_for_send_window``)."""
    granted: int = getattr(channel, "out_max_packet_size", _DEFAULT_PACKET)
    return max(1024, granted - 64)


def _close_channel(channel: paramiko.Channel) -> None:
    """Closing sends a message; on a transport that just died that fails, and that is fine."""
    with contextlib.suppress(EOFError, OSError, paramiko.SSHException):
        channel.close()


def _close_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()


def _send_quietly(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.send(b"\0")
