"""One SSH connection per hypervisor: keys, strict host-key checking, the libvirt channel.

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

The channel primitives (streamlocal, remote ``test``) live in
``sshchannel``; ``SocketBridge`` (``sshbridge``) turns such channels into a
local unix socket for libvirt-python.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import shlex
import socket
import stat
import threading
import time
from pathlib import Path

import paramiko

from reconciler.adapters.hypervisor.transport.sshchannel import (
    SOCKET_MISSING,
    SOCKET_STALE,
    open_streamlocal,
    remote_output,
    remote_test,
    socket_state,
)
from reconciler.adapters.hypervisor.transport.sshpaths import known_hosts_name
from reconciler.errors import HostError, PermanentError, TransientError
from reconciler.model import Host
from reconciler.model.settings import SshSettings

log = logging.getLogger("reconciler.ssh")
# paramiko's transport thread logs its own tracebacks at ERROR when a handshake fails
# (a dial whose deadline closed the socket: "Error reading SSH protocol banner ... Bad
# file descriptor"). The same failure reaches the dial as an exception, which is
# classified and logged once (reconciler.errors); the thread's copy is noise, and it
# can fire after the dial gave up, into whatever stream logging then points at.
logging.getLogger("paramiko.transport").setLevel(logging.CRITICAL)

SSH_HELPER_COMMAND = "virt-ssh-helper qemu:///system"
STREAMLOCAL_RETRY = 300.0
"""Seconds a connection keeps using the helper after sshd refused forwarding."""
_RSA_ALGORITHMS = ("rsa-sha2-512", "rsa-sha2-256")
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


def _enable_tcp_keepalive(sock: socket.socket, interval: float) -> None:
    """Let the kernel notice a dead peer too (paramiko's keepalives expect no reply)."""
    seconds = max(1, int(interval))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, seconds)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, seconds)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
