"""The daemon's control socket: a local unix socket for ``proxyfleet reconcile``, ``get``
and ``info``, open to root only.

Who may ask is decided twice: the socket file is made mode 0600 inside the state
dir (so owned by the daemon's user: root when the daemon runs as root, the
``proxyfleet`` user under the shipped unit, and root passes file permissions
either way), and every connection's peer is checked with ``SO_PEERCRED``: a uid
other than root's is answered with one refusal line and closed (and logged),
including the daemon's own user, whose processes have no business asking. It is
not on the network.

The protocol is JSON lines. The client sends one request line
(``{"command": "reconcile"}``, ``{"command": "get"}``, ``{"command": "info",
"name": "web-1"}``); the daemon answers with one or more lines and closes the
connection. ``reconcile`` answers at once that the run is queued and again when
the run that started after the request has finished, possibly many minutes
later. The server stays small whatever a local root process sends: a request
line is at most ``MAX_REQUEST`` bytes and must arrive within ``READ_TIMEOUT``
seconds; at most ``MAX_CLIENTS`` connections are served at once, further ones
are told so and closed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import stat
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from reconciler.errors import ControlError

log = logging.getLogger(__name__)

SOCKET_NAME = "control.sock"
"""The socket's file name in the daemon's state dir."""
ROOT_ONLY = frozenset({0})
MAX_ADDRESS = 100
"""Bytes of a socket path used as it is (the kernel's limit is 108 with the final NUL)."""
MAX_REQUEST = 64 * 1024
READ_TIMEOUT = 10.0
MAX_CLIENTS = 16
MAX_ANSWER_LINE = 16 * 1024 * 1024
"""Bytes of one answer line the client accepts (a ``get`` of a large fleet stays far below)."""

Reply = Callable[[Mapping[str, Any]], None]
Handler = Callable[[Mapping[str, Any], Reply], None]
"""Answers one request by calling ``reply`` once or more; may block (``reconcile``)."""


def socket_path(state_dir: Path) -> Path:
    return state_dir / SOCKET_NAME


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected unix socket (SO_PEERCRED)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return int(uid)


class ControlServer:
    """Serves ``handler`` on a unix socket at ``path``; ``start`` / ``stop``."""

    def __init__(
        self,
        path: Path,
        handler: Handler,
        *,
        allowed_uids: frozenset[int] | None = None,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        """Binds now (raises OSError, e.g. another daemon's live socket is there).

        ``allowed_uids``: root only by default.
        """
        self.path = path
        self._handler = handler
        self._allowed = allowed_uids if allowed_uids is not None else frozenset({0, os.geteuid()})
        self._slots = threading.BoundedSemaphore(max_clients)
        self._stopping = threading.Event()
        self._listener = _bind(path)
        self._inode = path.lstat().st_ino
        self._thread = threading.Thread(target=self._accept_loop, name="control", daemon=True)

    def start(self) -> None:
        self._thread.start()
        log.info("Control socket %s ready (root only).", self.path)

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        with contextlib.suppress(FileNotFoundError):
            # Only our own socket: a new daemon may have replaced it since.
            if _is_socket(self.path) and self.path.stat().st_ino == self._inode:
                self.path.unlink()

    def _accept_loop(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                if self._stopping.is_set():
                    return
                time.sleep(0.1)
                continue
            if not self._slots.acquire(blocking=False):
                _send(conn, {"error": "busy: too many control connections; try again"})
                conn.close()
                continue
            threading.Thread(
                target=self._serve, args=(conn,), name="control-client", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            uid = peer_uid(conn)
            # The request is read (bounded) before a refusal too: a socket closed with
            # unread data resets its peer, which could then miss the refusal line.
            request = _parse_request(_read_line(conn))
            if uid not in self._allowed:
                log.warning("Control socket: refused a client running as uid %d.", uid)
                _send(conn, {"error": f"refused: uid {uid} may not use the control socket"})
                return
            if isinstance(request, str):
                _send(conn, {"error": request})
                return
            conn.settimeout(None)
            self._handler(request, lambda answer: _send(conn, answer))
        except OSError as exc:  # the client left; nothing to answer
            log.debug("Control client gone: %s", exc)
        except Exception as exc:  # a bug in one request must not end the daemon
            log.error("A control request failed: %s", exc, exc_info=True)
            with contextlib.suppress(OSError):
                _send(conn, {"error": f"internal error: {type(exc).__name__}"})
        finally:
            conn.close()
            self._slots.release()


def _bind(path: Path) -> socket.socket:
    """A listening socket at ``path``, mode 0600 from its first moment (umask)."""
    if path.is_symlink() or (path.exists() and not _is_socket(path)):
        raise OSError(f"{path} exists and is not a socket; not replacing it")
    if _is_socket(path):
        if _answers(path):
            raise OSError(f"{path}: another daemon answers on it")
        path.unlink()  # left by a daemon that died
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        with _address(path) as address:
            listener.bind(address)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    listener.listen(MAX_CLIENTS)
    return listener


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(path.lstat().st_mode)
    except FileNotFoundError:
        return False


@contextlib.contextmanager
def _address(path: Path) -> Iterator[str]:
    """An address for ``path`` that fits a unix socket's 108 bytes: the path itself, or for a
    longer one (a deep stateDir) the socket's name under its directory's descriptor
    (``/proc/self/fd/N/control.sock``), which the kernel resolves to the same file."""
    if len(os.fsencode(path)) < MAX_ADDRESS:
        yield str(path)
        return
    fd = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{fd}/{path.name}"
    finally:
        os.close(fd)


def _answers(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with _address(path) as address:
            probe.connect(address)
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _read_line(conn: socket.socket) -> bytes | None:
    """The request line; None when it is not complete in time or too long."""
    conn.settimeout(READ_TIMEOUT)
    data = bytearray()
    deadline = time.monotonic() + READ_TIMEOUT
    while b"\n" not in data:
        if len(data) > MAX_REQUEST or time.monotonic() > deadline:
            return None
        try:
            chunk = conn.recv(4096)
        except TimeoutError:
            return None
        if not chunk:
            return None
        data += chunk
    return bytes(data).split(b"\n", 1)[0]


def _parse_request(line: bytes | None) -> Mapping[str, Any] | str:
    """The request, or what is wrong with it."""
    if line is None:
        return "bad request: no complete request line in time, or one too long"
    try:
        request = json.loads(line)
    except ValueError:
        request = None
    if not isinstance(request, dict) or not isinstance(request.get("command"), str):
        return 'bad request: send one JSON object line with a "command"'
    return request


def _send(conn: socket.socket, answer: Mapping[str, Any]) -> None:
    conn.sendall(json.dumps(answer, default=str).encode() + b"\n")


def request(
    path: Path, message: Mapping[str, Any], *, timeout: float | None = None
) -> Iterator[Mapping[str, Any]]:
    """Send ``message`` to the daemon at ``path`` and yield each answer line as it comes.

    ``timeout``: seconds for the whole exchange (None: no limit). Raises ControlError
    when no daemon listens, the caller may not use the socket, the answer is broken, or
    the time is up; an ``{"error": ...}`` line from the daemon is raised as ControlError
    too.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        try:
            with _address(path) as address:
                sock.connect(address)
        except FileNotFoundError as exc:
            raise ControlError(
                f"no daemon control socket at {path}; is proxyfleet run up?"
            ) from exc
        except PermissionError as exc:
            raise ControlError(f"{path}: permission denied (the control socket is root's)") from exc
        except OSError as exc:
            raise ControlError(f"cannot reach the daemon at {path}: {exc.strerror or exc}") from exc
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            # Refused before the request was read: the refusal line is waiting.
            sock.sendall(json.dumps(message).encode() + b"\n")
        yield from _answers_of(sock, path, deadline)
    finally:
        sock.close()


def _answers_of(
    sock: socket.socket, path: Path, deadline: float | None
) -> Iterator[Mapping[str, Any]]:
    buffer = bytearray()
    while True:
        while b"\n" in buffer:
            line, _, rest = bytes(buffer).partition(b"\n")
            buffer = bytearray(rest)
            yield _answer(line, path)
        if len(buffer) > MAX_ANSWER_LINE:
            raise ControlError(f"{path}: an answer line longer than {MAX_ANSWER_LINE} bytes")
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ControlError("no answer from the daemon in time (a run it started goes on)")
            sock.settimeout(left)
        try:
            chunk = sock.recv(65536)
        except TimeoutError as exc:
            raise ControlError(
                "no answer from the daemon in time (a run it started goes on)"
            ) from exc
        except OSError as exc:
            raise ControlError(f"the daemon at {path} hung up: {exc}") from exc
        if not chunk:
            if buffer:
                raise ControlError(f"{path}: the answer ended in the middle of a line")
            return
        buffer += chunk


def _answer(line: bytes, path: Path) -> Mapping[str, Any]:
    try:
        answer = json.loads(line)
    except ValueError as exc:
        raise ControlError(f"{path}: an answer that is not JSON") from exc
    if not isinstance(answer, dict):
        raise ControlError(f"{path}: an answer that is not a JSON object")
    if "error" in answer:
        raise ControlError(f"the daemon says: {answer['error']}")
    return answer
