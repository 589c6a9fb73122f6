"""``OpenSshForward``: the host's libvirt socket forwarded by the system's OpenSSH client.

``ssh.libvirtTransport: openssh`` (docs/hosts.md): instead of pumping libvirt's
bytes through paramiko in Python threads (``SocketBridge``), an ``ssh -N -L
<local socket>:<host's libvirt socket>`` process carries them, encrypted in C,
as ``scp`` does. libvirt-python opens the local socket as for the bridge. The
child checks the host as strictly as the paramiko link does, so a dial is the
child alone: the paramiko link (and paramiko itself) is loaded only when the
child fails, to find and classify why as it always has (host key,
authentication, libvirtd's socket missing, sshd refusing forwarding), or for
what needs it (remote reads, checks; ``LibvirtSession._dial``). A child that
reached no SSH server at all is ``SshUnreachable``, and the link is not tried
after it. OpenSSH only carries the bytes, with the same key and known_hosts
file and no user or system ssh_config:

- ``-F /dev/null``: no ``~/.ssh/config`` and no ``/etc/ssh/ssh_config`` (no
  ProxyCommand, ControlMaster or forwarding someone configured);
- ``StrictHostKeyChecking=yes`` against ``ssh.knownHostsFile`` only
  (``GlobalKnownHostsFile=/dev/null``), ``UpdateHostKeys=no``, ``CheckHostIP=no``:
  the file is only read, never written; ``HostKeyAlias`` names the host as the
  paramiko link looks it up (``[addr]:port`` off port 22), since OpenSSH alone also
  accepts a line for the bare address as the key of a host on another port;
- ``IdentitiesOnly=yes``, ``IdentityAgent=none``, ``BatchMode=yes``: the key file
  and nothing else (no agent, no password prompt);
- ``ForwardAgent=no``, ``ForwardX11=no``, ``PermitLocalCommand=no``, ``-N``: no
  command runs on the host, nothing of this machine is offered to it;
- ``ExitOnForwardFailure=yes``; the local socket is created 0600
  (``StreamLocalBindMask=0177``) in a private 0700 directory, like the bridge's;
- AES-GCM preferred (``CIPHERS``), the rest of OpenSSH's default ciphers after it.

The process is this process's child: ``close`` (the session's teardown, a
deadline's abort, the exit hook) terminates it; under systemd the unit's
cgroup takes it down with the daemon in any case. A process killed outside
systemd (``kill -9`` of a ``proxyfleet apply``) runs no exit hook, so the
child is also told to die with it: Linux's parent-death signal
(``PR_SET_PDEATHSIG``, SIGTERM). That signal follows the *thread* that forked
the child, and a dial may run on a worker thread that ends long before the
process, so every child is forked by one thread that lives as long as the
process (``_spawn``).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from reconciler.adapters.hypervisor.transport.sshpaths import known_hosts_name, private_socket_dir
from reconciler.errors import PermanentError, TransientError
from reconciler.model import Host
from reconciler.model.settings import SshSettings

log = logging.getLogger("reconciler.ssh")

SSH_BINARY = "ssh"
CIPHERS = ",".join(
    (
        "aes128-gcm@openssh.com",
        "aes256-gcm@openssh.com",
        "chacha20-poly1305@openssh.com",
        "aes128-ctr",
        "aes192-ctr",
        "aes256-ctr",
    )
)
"""OpenSSH's default ciphers with AES-GCM first, as the paramiko link prefers them: with
AES-NI, ssh spends about a third of the CPU per GiB that chacha20-poly1305 takes here."""
_POLL = 0.01
_STOP_WAIT = 2.0
_PR_SET_PDEATHSIG = 1
_LIBC = ctypes.CDLL(None, use_errno=True)
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ssh-spawner")
"""The one thread that forks every ``ssh`` child: it lives until the process exits, so
the children's parent-death signal fires when the process dies, not when a worker
thread that happened to dial ends."""


def _die_with_parent(parent: int) -> None:
    """Runs in the child between fork and exec: SIGTERM when the forking thread dies
    (best effort: a seccomp filter may refuse prctl; close and the unit's cgroup remain)."""
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)  # the parent died before the signal was armed


def _spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    """``argv`` started by the spawner thread, dying with this process."""
    parent = os.getpid()

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: _die_with_parent(parent),
        )

    return _SPAWNER.submit(start).result()


_CONNECT_FAILED = re.compile(r"connect to host \S+ port \d+: (.+)")
"""What ``ssh`` says when it gets no TCP connection (refused, timed out, no route)."""


class SshUnreachable(TransientError):
    """The ``ssh`` child reached no SSH server: no TCP connection, or no socket in time.
    ``LibvirtSession`` does not dial the paramiko link after it to say why, which would
    only wait as long again."""


_ACCEPTING = 0x10000
"""``__SO_ACCEPTCON`` in /proc/self/net/unix's Flags: the socket listens."""


def listening(path: str) -> bool:
    """Whether a unix socket at ``path`` accepts connections.

    ssh creates the ``-L`` socket with bind(), which makes the file, and then calls
    listen(): a connect in between is refused (ECONNREFUSED), which a loaded machine
    showed as a failed ``virConnectOpen``. So the file is not enough; the kernel's
    socket table (/proc/self/net/unix, there under systemd's ProcSubset=pid too) must
    say the socket at that path listens. Where it cannot be read, the file is all
    there is to go by.
    """
    if not os.path.exists(path):
        return False
    try:
        table = Path("/proc/self/net/unix").read_text(errors="replace")
    except OSError:
        return True
    suffix = " " + path
    for line in table.splitlines()[1:]:
        if line.endswith(suffix):
            fields = line.split()
            if len(fields) >= 8 and int(fields[3], 16) & _ACCEPTING:
                return True
    return False


def ssh_command(host: Host, settings: SshSettings, local: str, *, binary: str) -> list[str]:
    """The ``ssh`` command line that forwards ``local`` to ``host``'s libvirt socket."""
    options = {
        "BatchMode": "yes",
        "StrictHostKeyChecking": "yes",
        "UserKnownHostsFile": str(settings.known_hosts_file),
        # The name to look up, as the paramiko link does: without it OpenSSH also takes a
        # line for the bare address as the key of a host on another port.
        "HostKeyAlias": known_hosts_name(host.address, host.port),
        "GlobalKnownHostsFile": "/dev/null",
        "UpdateHostKeys": "no",
        "CheckHostIP": "no",
        "VerifyHostKeyDNS": "no",
        "IdentitiesOnly": "yes",
        "IdentityAgent": "none",
        "PasswordAuthentication": "no",
        "KbdInteractiveAuthentication": "no",
        "ForwardAgent": "no",
        "ForwardX11": "no",
        "PermitLocalCommand": "no",
        "ControlMaster": "no",
        "ControlPath": "none",
        "ExitOnForwardFailure": "yes",
        "StreamLocalBindMask": "0177",
        "StreamLocalBindUnlink": "yes",
        "ConnectTimeout": str(max(1, int(settings.connect_timeout))),
        "ServerAliveInterval": str(max(1, int(settings.keepalive_interval))),
        "ServerAliveCountMax": "3",
        "LogLevel": "ERROR",
        "Ciphers": CIPHERS,
    }
    argv = [binary, "-F", "/dev/null", "-N", "-T", "-i", str(settings.key_file)]
    for key, value in options.items():
        argv += ["-o", f"{key}={value}"]
    argv += ["-p", str(host.port), "-l", host.user, "-L", f"{local}:{host.socket}"]
    return [*argv, "--", host.address]


class OpenSshForward:
    """A local unix socket that an ``ssh -N -L`` child forwards to the host's libvirt socket.

    Same surface as ``SocketBridge`` (``uri``, ``prepare``, ``close``, ``stderr_tail``),
    so ``LibvirtSession`` uses either."""

    def __init__(self, host: Host, settings: SshSettings, *, binary: str = SSH_BINARY) -> None:
        self._host = host
        self._settings = settings
        self._binary = binary
        self._dir, self.path = private_socket_dir(host.name)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._pending: tuple[subprocess.Popen[bytes], threading.Thread] | None = None
        """A child ``start`` started whose socket ``prepare`` has not waited for yet."""
        self._closed = False
        self._spawned = 0.0
        self.stderr_tail = ""

    @property
    def uri(self) -> str:
        return f"qemu+unix:///system?socket={self.path}"

    @property
    def alive(self) -> bool:
        proc = self._proc
        return proc is not None and proc.poll() is None

    def start(self) -> None:
        """Start the ``ssh`` child without waiting for its socket, so that its handshake
        overlaps what the caller does next (``LibvirtSession.dial_ahead``); ``prepare``
        then waits for it. Does nothing when a child runs, the forward was closed, or
        there is no ``ssh`` (``prepare`` says so)."""
        with self._lock:
            if self._closed or self._pending is not None or self.alive:
                return
            with contextlib.suppress(PermanentError):  # no ssh: prepare raises it again
                self._pending = self._spawn_child()

    def prepare(self) -> None:
        """Start the ``ssh`` child unless it runs (or ``start`` started it), and wait until
        its socket listens (``ssh.connectTimeoutSeconds``). SshUnreachable when it reached
        no SSH server (no TCP connection, or no socket in time), TransientError when it
        exits otherwise (its stderr in the message), PermanentError when there is no
        ``ssh``."""
        with self._lock:
            if self._closed:
                raise TransientError("the libvirt forward was closed", host=self._host.name)
            pending, self._pending = self._pending, None
            if pending is None:
                if self.alive and os.path.exists(self.path):
                    return
                self._stop()
                pending = self._spawn_child()
            self._wait_listening(*pending)

    def _spawn_child(self) -> tuple[subprocess.Popen[bytes], threading.Thread]:
        argv = ssh_command(self._host, self._settings, self.path, binary=self._binary)
        binary = shutil.which(self._binary)
        if binary is None:
            raise PermanentError(
                f"ssh.libvirtTransport openssh needs OpenSSH's client ({self._binary!r}) on "
                "PATH; install openssh-client or use the default transport",
                host=self._host.name,
            )
        self._spawned = time.monotonic()
        self.stderr_tail = ""
        proc = _spawn([binary, *argv[1:]])
        self._proc = proc
        reader = threading.Thread(
            target=self._read_stderr, args=(proc,), name=f"ssh-{self._host.name}", daemon=True
        )
        reader.start()
        return proc, reader

    def _read_stderr(self, proc: subprocess.Popen[bytes]) -> None:
        """Keep the tail of what ssh says (it says little at LogLevel ERROR), and log it."""
        assert proc.stderr is not None
        with contextlib.suppress(OSError, ValueError):
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace").strip()
                if line:
                    self.stderr_tail = (self.stderr_tail + "\n" + line).strip()[-2000:]
                    log.warning("host %s: ssh (libvirt forward) says: %s", self._host.name, line)

    def _wait_listening(self, proc: subprocess.Popen[bytes], reader: threading.Thread) -> None:
        deadline = time.monotonic() + self._settings.connect_timeout
        name = known_hosts_name(self._host.address, self._host.port)
        while not listening(self.path):
            if proc.poll() is not None:
                reader.join(_STOP_WAIT)
                unreached = _CONNECT_FAILED.search(self.stderr_tail)
                if unreached is not None:
                    raise SshUnreachable(
                        f"cannot reach SSH at {name}: {unreached.group(1)}", host=self._host.name
                    )
                raise TransientError(
                    f"ssh forwarding libvirt's socket to {self._host.address} exited "
                    f"({proc.returncode}): {self.stderr_tail or 'no message'}",
                    host=self._host.name,
                )
            if time.monotonic() > deadline:
                self._stop()
                raise SshUnreachable(
                    f"ssh forwarding libvirt's socket to {self._host.address} did not listen "
                    f"within {self._settings.connect_timeout:g} s",
                    host=self._host.name,
                )
            time.sleep(_POLL)
        log.info(
            "SSH connected to %s as %s in %.0f ms (ssh pid %d forwards libvirt's socket)",
            name,
            self._host.user,
            (time.monotonic() - self._spawned) * 1000,
            proc.pid,
        )

    def close(self) -> None:
        """Stop the child, remove the directory. Idempotent."""
        with self._lock:
            self._closed = True
            self._stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def _stop(self) -> None:
        self._pending = None
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(_STOP_WAIT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(OSError):
            Path(self.path).unlink()
