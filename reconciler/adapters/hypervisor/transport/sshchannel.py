"""SSH channel primitives on a live transport: the streamlocal channel, remote ``test`` probes.

``open_streamlocal`` opens OpenSSH's ``direct-streamlocal@openssh.com`` to a
remote unix socket (paramiko has no API for it); ``socket_state`` and
``remote_test`` ask the host, over an exec channel, what is at a path, so a
refused channel can be told apart from a missing socket; ``remote_output`` reads
what a command prints (the host's ARP table).
"""

from __future__ import annotations

import shlex
import threading
import time
from typing import Any

import paramiko

STREAMLOCAL = "direct-streamlocal@openssh.com"


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
