"""One SSH connection per hypervisor, and the libvirt socket forwarded through it.

``SshConnection`` dials lazily (on the first call that needs it), checks the
host key strictly against the configured known_hosts file (port-aware entries
such as ``[10.0.0.5]:2222``), loads the private key at dial time and redials
after a drop. Failures are classified here, once:

- TCP connect, handshake timeout, connection reset: TransientError.
- Unknown or changed host key: PermanentError naming the host and the SHA256
  fingerprint the server offered.
- Private key file missing: TransientError (it may appear later, e.g. a secret
  mounted after start; the next attempt heals without restart). Unparsable,
  passphrase-protected, or readable by group/others: PermanentError.
- Authentication refused: PermanentError.

The remote libvirt socket is reached with an OpenSSH
``direct-streamlocal@openssh.com`` channel. A server that refuses it gets an
exec of ``virt-ssh-helper qemu:///system`` instead; the choice is remembered
for ``STREAMLOCAL_RETRY`` seconds, then streamlocal is tried again. OpenSSH
refuses with "Connect failed" both when forwarding is off
(``AllowStreamLocalForwarding no``, and also ``AllowTcpForwarding no``, which
empties its permitted-open list) and when the socket is missing (libvirtd
stopped or restarting), so a refusal is told apart by asking the host whether
the socket exists (``test -S``) and whether anything listens on it
(``/proc/net/unix``): missing, or a file left by a killed libvirtd, is a
TransientError that keeps streamlocal; a listening socket means forwarding is
refused and the helper is used.
Nothing runs on the hypervisor but sshd and libvirt.

``SocketBridge`` exposes such channels as a local unix socket in a private
0700 directory that libvirt-python opens as ``qemu+unix:///system?socket=...``.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import logging
import os
import select
import shlex
import socket
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paramiko

from reconciler.errors import HostError, PermanentError, TransientError
from reconciler.model import Host
from reconciler.model.settings import SshSettings

log = logging.getLogger("reconciler.ssh")

STREAMLOCAL = "direct-streamlocal@openssh.com"
SSH_HELPER_COMMAND = "virt-ssh-helper qemu:///system"
STREAMLOCAL_RETRY = 300.0
"""Seconds a connection keeps using the helper after sshd refused forwarding."""
_RSA_ALGORITHMS = ("rsa-sha2-512", "rsa-sha2-256")
_CHUNK = 256 * 1024
_DEFAULT_PACKET = 32768
_AEAD_CIPHERS = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
"""Preferred over paramiko's default order (aes-ctr first, with a separate HMAC per packet):
AES-GCM encrypts and authenticates a packet in one call, which moves base images about a
third faster through the bridge (benchmarks, row 3). OpenSSH servers offer it by default."""


def preferred_ciphers(available: tuple[str, ...]) -> tuple[str, ...]:
    """``available`` (paramiko's order) with the AEAD ciphers it knows moved to the front."""
    first = tuple(c for c in _AEAD_CIPHERS if c in available)
    return first + tuple(c for c in available if c not in first)


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's ``SHA256:...`` fingerprint of a public key (base64, no padding)."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    """The name OpenSSH writes into known_hosts: ``addr`` on 22, else ``[addr]:port``."""
    return address if port == 22 else f"[{address}]:{port}"


def load_private_key(path: Path, *, host: str) -> paramiko.PKey:
    """Read the private key, refusing one that group or others may read."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise TransientError(
            f"SSH private key {path} does not exist (yet); will retry", host=host
        ) from None
    except OSError as exc:
        raise TransientError(f"SSH private key {path} cannot be read: {exc}", host=host) from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PermanentError(
            f"SSH private key {path} is accessible by group or others "
            f"(mode {stat.S_IMODE(mode):04o}); chmod 600 it",
            host=host,
        )
    try:
        return paramiko.PKey.from_path(path)
    except FileNotFoundError:
        raise TransientError(
            f"SSH private key {path} does not exist (yet); will retry", host=host
        ) from None
    except paramiko.PasswordRequiredException as exc:
        raise PermanentError(
            f"SSH private key {path} is passphrase-protected; proxyfleet needs an unencrypted key",
            host=host,
        ) from exc
    except (paramiko.SSHException, ValueError, TypeError) as exc:
        raise PermanentError(f"SSH private key {path} cannot be parsed: {exc}", host=host) from exc


def _known_keys(known_hosts: Path, name: str, *, host: str) -> dict[str, paramiko.PKey]:
    try:
        keys = paramiko.HostKeys(str(known_hosts))
    except FileNotFoundError:
        raise TransientError(
            f"known_hosts file {known_hosts} does not exist (yet); will retry", host=host
        ) from None
    except (OSError, paramiko.SSHException) as exc:
        raise PermanentError(
            f"known_hosts file {known_hosts} is unusable: {exc}", host=host
        ) from exc
    entry = keys.lookup(name)
    return dict(entry.items()) if entry else {}


def _preferred_algorithms(known: dict[str, paramiko.PKey]) -> list[str]:
    """Host key algorithms to offer, like OpenSSH: those known_hosts has a key for."""
    algorithms: list[str] = []
    for key_type in known:
        algorithms.extend(_RSA_ALGORITHMS if key_type == "ssh-rsa" else (key_type,))
    return algorithms


def check_host_key(
    known: dict[str, paramiko.PKey],
    offered: paramiko.PKey,
    *,
    name: str,
    known_hosts: Path,
    host: str,
) -> None:
    """Strict checking: the offered key must be listed for ``name``, byte for byte."""
    key_type = offered.get_name()
    seen = f"{key_type} {fingerprint(offered)}"
    expected = known.get(key_type)
    if expected is None:
        raise PermanentError(
            f"host key of {name} is not in {known_hosts} (server offered {seen}); "
            "add it with ssh-keyscan after checking the fingerprint on the host",
            host=host,
        )
    if expected.asbytes() != offered.asbytes():
        raise PermanentError(
            f"HOST KEY CHANGED for {name}: server offered {seen}, {known_hosts} "
            f"lists {fingerprint(expected)}; refusing to connect",
            host=host,
        )


class SshConnection:
    """The SSH link to one host: lazy, strict, redialled after a drop. Thread-safe."""

    def __init__(self, host: Host, settings: SshSettings) -> None:
        self._host = host
        self._settings = settings
        self._lock = threading.Lock()
        self._transport: paramiko.Transport | None = None
        self._refused_at: float | None = None

    @property
    def name(self) -> str:
        return known_hosts_name(self._host.address, self._host.port)

    @property
    def streamlocal_refused(self) -> bool:
        """True while this connection uses the helper because sshd refused forwarding (for
        ``STREAMLOCAL_RETRY`` seconds after the refusal)."""
        at = self._refused_at
        return at is not None and time.monotonic() - at < STREAMLOCAL_RETRY

    @property
    def current(self) -> paramiko.Transport | None:
        """The transport of the link now in use, if any; never dials."""
        return self._transport

    @property
    def is_active(self) -> bool:
        transport = self._transport
        return transport is not None and transport.is_active()

    def transport(self) -> paramiko.Transport:
        """The live transport, dialling first if there is none or it dropped."""
        with self._lock:
            current = self._transport
            if current is not None and current.is_active():
                return current
            if current is not None:
                log.info("SSH connection to %s dropped; redialling", self.name)
                current.close()
            self._transport = self._dial()
            self._refused_at = None
            return self._transport

    def close(self) -> None:
        with self._lock:
            if self._transport is not None:
                self._transport.close()
                self._transport = None

    def _dial(self) -> paramiko.Transport:
        host, settings = self._host.name, self._settings
        key = load_private_key(settings.key_file, host=host)
        known = _known_keys(settings.known_hosts_file, self.name, host=host)
        started = time.monotonic()
        try:
            sock = socket.create_connection(
                (self._host.address, self._host.port), timeout=settings.connect_timeout
            )
        except OSError as exc:
            raise TransientError(f"cannot reach SSH at {self.name}: {exc}", host=host) from exc
        _enable_tcp_keepalive(sock, settings.keepalive_interval)
        transport = paramiko.Transport(sock)
        try:
            options = transport.get_security_options()
            options.ciphers = preferred_ciphers(tuple(options.ciphers))
            if known:
                options.key_types = _preferred_algorithms(known)
            self._handshake(transport)
            check_host_key(
                known,
                transport.get_remote_server_key(),
                name=self.name,
                known_hosts=settings.known_hosts_file,
                host=host,
            )
            self._authenticate(transport, key)
        except BaseException:
            transport.close()
            raise
        transport.set_keepalive(max(1, int(settings.keepalive_interval)))
        log.info(
            "SSH connected to %s as %s in %.0f ms",
            self.name,
            self._host.user,
            (time.monotonic() - started) * 1000,
        )
        return transport

    def _handshake(self, transport: paramiko.Transport) -> None:
        """Key exchange within the connect deadline; a silent or dying server is transient."""
        timeout = self._settings.connect_timeout
        transport.banner_timeout = timeout
        transport.handshake_timeout = timeout
        try:
            transport.start_client(timeout=timeout)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransientError(
                f"SSH handshake with {self.name} failed within {timeout:g} s: {exc}",
                host=self._host.name,
            ) from exc
        # start_client returns quietly when its timeout passes mid-negotiation.
        if not (transport.is_active() and getattr(transport, "initial_kex_done", False)):
            raise TransientError(
                f"SSH handshake with {self.name} did not finish within {timeout:g} s",
                host=self._host.name,
            )

    def _authenticate(self, transport: paramiko.Transport, key: paramiko.PKey) -> None:
        host = self._host.name
        try:
            transport.auth_publickey(self._host.user, key)
        except paramiko.AuthenticationException as exc:
            raise PermanentError(
                f"SSH server {self.name} refused key {fingerprint(key)} for user "
                f"{self._host.user}: {exc}",
                host=host,
            ) from exc
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransientError(
                f"SSH authentication to {self.name} failed: {exc}", host=host
            ) from exc
        if not transport.is_authenticated():
            raise PermanentError(
                f"SSH server {self.name} wants more than public-key authentication", host=host
            )

    def test_path(self, flag: str, path: str) -> bool | None:
        """``test <flag> <path>`` on the host (see ``remote_test``); None when it cannot tell."""
        try:
            transport = self.transport()
        except HostError:
            return None
        return remote_test(transport, flag, path, timeout=self._settings.connect_timeout)

    def read_text(self, path: str, *, limit: int) -> str | None:
        """The host's file ``path`` (``cat``, at most ``limit`` bytes); None when the host
        does not say (no shell, a forced command, no answer in time, too long)."""
        try:
            transport = self.transport()
        except HostError:
            return None
        command = f"cat {shlex.quote(path)}"
        return remote_output(transport, command, self._settings.connect_timeout, limit=limit)

    def open_libvirt_channel(self) -> paramiko.Channel:
        """A fresh channel speaking the libvirt RPC protocol to the host's libvirtd."""
        transport = self.transport()
        timeout = self._settings.connect_timeout
        if not self.streamlocal_refused:
            try:
                return open_streamlocal(transport, self._host.socket, timeout=timeout)
            except paramiko.ChannelException as exc:
                # OpenSSH answers "Connect failed" both when forwarding is off and
                # when the socket is missing: ask the host which one it is.
                state = socket_state(transport, self._host.socket, timeout=timeout)
                if state in (SOCKET_MISSING, SOCKET_STALE):
                    what = "is missing" if state == SOCKET_MISSING else "has no listener"
                    raise TransientError(
                        f"libvirt's socket {self._host.socket} {what} on {self.name} "
                        "(libvirtd stopped or restarting)",
                        host=self._host.name,
                    ) from exc
                log.info(
                    "sshd on %s refuses unix socket forwarding to %s (%s; the socket exists "
                    "and listens); "
                    "using %s for %.0f s",
                    self.name,
                    self._host.socket,
                    exc.text,
                    SSH_HELPER_COMMAND,
                    STREAMLOCAL_RETRY,
                )
                self._refused_at = time.monotonic()
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise TransientError(
                    f"opening a channel to {self.name} failed: {exc}", host=self._host.name
                ) from exc
        try:
            channel = transport.open_session(timeout=timeout)
            channel.exec_command(SSH_HELPER_COMMAND)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise TransientError(
                f"running {SSH_HELPER_COMMAND} on {self.name} failed: {exc}", host=self._host.name
            ) from exc
        return channel


def remote_test(
    transport: paramiko.Transport, flag: str, path: str, *, timeout: float
) -> bool | None:
    """``test <flag> <path>`` on the host over an exec channel: True, False, or None when
    the host does not say (no shell, a forced command, no answer in time)."""
    status = remote_exit(transport, f"test {shlex.quote(flag)} {shlex.quote(path)}", timeout)
    return {0: True, 1: False}.get(status) if status is not None else None


SOCKET_LISTENING, SOCKET_MISSING, SOCKET_STALE = "listening", "missing", "stale"
_LISTENING_FLAG = "00010000"  # __SO_ACCEPTCON in /proc/net/unix: a socket that listens


def socket_state(transport: paramiko.Transport, path: str, *, timeout: float) -> str | None:
    """What is at ``path`` on the host: ``SOCKET_MISSING`` (no unix socket there),
    ``SOCKET_STALE`` (a socket file nobody listens on, as a killed libvirtd leaves it; told
    by /proc/net/unix, which lists the listening sockets of sshd's network namespace) or
    ``SOCKET_LISTENING`` (also when the host cannot say more than that the file is a socket:
    no /proc/net/unix). None when the host does not answer (no shell, a forced command, no
    answer in time)."""
    quoted = shlex.quote(path)
    # /proc/net/unix names a socket by the path it was bound to, which may differ from
    # ``path`` by links (/var/run -> /run): the listening sockets of the same file name are
    # resolved and compared. Exit 0 listening, 1 missing, 3 stale.
    name = shlex.quote(path.rstrip("/").rsplit("/", 1)[-1])
    command = (
        f"test -S {quoted} || exit 1; test -r /proc/net/unix || exit 0; "
        f"p=$(readlink -f {quoted}) || exit 0; "
        f"awk -v b={name} "
        f'\'$4 == "{_LISTENING_FLAG}" {{ n = split($NF, c, "/"); if (c[n] == b) print $NF }}\' '
        "/proc/net/unix | "
        '{ while read -r s; do [ "$(readlink -f "$s")" = "$p" ] && exit 0; done; exit 3; }'
    )
    status = remote_exit(transport, command, timeout)
    states = {0: SOCKET_LISTENING, 1: SOCKET_MISSING, 3: SOCKET_STALE}
    return states.get(status) if status is not None else None


def remote_exit(transport: paramiko.Transport, command: str, timeout: float) -> int | None:
    """The exit status of ``command`` run on the host over an exec channel; None when the
    host does not say (no shell, a forced command, no answer in time)."""
    try:
        channel = transport.open_session(timeout=timeout)
    except (paramiko.SSHException, OSError, EOFError):
        return None
    try:
        channel.exec_command(command)
        if not channel.status_event.wait(timeout):
            return None
        return int(channel.recv_exit_status())
    except (paramiko.SSHException, OSError, EOFError):
        return None
    finally:
        channel.close()


def remote_output(
    transport: paramiko.Transport, command: str, timeout: float, *, limit: int
) -> str | None:
    """What ``command`` printed on the host, when it exited 0 within ``timeout`` and
    printed at most ``limit`` bytes; None otherwise."""
    try:
        channel = transport.open_session(timeout=timeout)
    except (paramiko.SSHException, OSError, EOFError):
        return None
    try:
        channel.settimeout(timeout)
        channel.exec_command(command)
        out = bytearray()
        while len(out) <= limit:
            chunk = channel.recv(65536)
            if not chunk:
                break
            out += chunk
        if len(out) > limit or not channel.status_event.wait(timeout):
            return None
        if channel.recv_exit_status() != 0:
            return None
        return out.decode("utf-8", "replace")
    except (paramiko.SSHException, OSError, EOFError):
        return None
    finally:
        channel.close()


def open_streamlocal(
    transport: paramiko.Transport, path: str, *, timeout: float
) -> paramiko.Channel:
    """Open ``direct-streamlocal@openssh.com`` to the remote unix socket ``path``.

    paramiko's ``open_channel`` packs a payload only for the tcpip and x11
    kinds, so this follows its body with the payload of OpenSSH's PROTOCOL,
    section 2.4: string socket path, string reserved, uint32 reserved.
    Raises paramiko.ChannelException with the server's reason code on refusal.
    """
    t: Any = transport  # private paramiko API, stable since 1.15
    if not t.active:
        raise paramiko.SSHException("SSH session not active")
    with t.lock:
        window_size = t._sanitize_window_size(None)
        max_packet_size = t._sanitize_packet_size(None)
        chanid = t._next_channel()
        message = paramiko.Message()
        message.add_byte(paramiko.common.cMSG_CHANNEL_OPEN)
        message.add_string(STREAMLOCAL)
        message.add_int(chanid)
        message.add_int(window_size)
        message.add_int(max_packet_size)
        message.add_string(path)
        message.add_string("")
        message.add_int(0)
        channel: Any = paramiko.Channel(chanid)
        t._channels.put(chanid, channel)
        event = threading.Event()
        t.channel_events[chanid] = event
        t.channels_seen[chanid] = True
        channel._set_transport(transport)
        channel._set_window(window_size, max_packet_size)
    t._send_user_message(message)
    deadline = time.monotonic() + timeout
    while not event.wait(0.1):
        if not t.active:
            raise t.get_exception() or paramiko.SSHException("Unable to open channel.")
        if time.monotonic() > deadline:
            raise paramiko.SSHException("Timeout opening channel.")
    opened = t._channels.get(chanid)
    if opened is None:
        raise t.get_exception() or paramiko.SSHException("Unable to open channel.")
    result: paramiko.Channel = opened
    return result


def _enable_tcp_keepalive(sock: socket.socket, interval: float) -> None:
    """Let the kernel notice a dead peer too (paramiko's keepalives expect no reply)."""
    seconds = max(1, int(interval))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, seconds)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, seconds)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


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
        base = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0] or tempfile.gettempdir()
        try:
            self._dir = tempfile.mkdtemp(prefix="proxyfleet-", dir=base)
            os.chmod(self._dir, 0o700)
            self.path = os.path.join(self._dir, "libvirt-sock")
            self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self._server.bind(self.path)
        except OSError as exc:
            raise PermanentError(
                f"cannot make the local libvirt socket under {base}: {exc}; "
                "give proxyfleet a writable RuntimeDirectory or /tmp",
                host=label,
            ) from exc
        self._server.listen(8)
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
        for leftover in (self.path, self._dir):
            try:
                (os.unlink if leftover == self.path else os.rmdir)(leftover)
            except OSError:
                log.debug("bridge cleanup: %s already gone", leftover)

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                ready, _, _ = select.select([self._server], [], [], 0.5)
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
