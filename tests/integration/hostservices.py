"""Real services for the integration tests: libvirtd + virtlogd and OpenSSH sshd.

Everything is started here, from nothing, on a fresh machine: no systemd, no
hand-made keys. libvirtd runs in the root namespace on the system socket and
is reused when something already serves it. Sessions that use it register in
/run/proxyfleet-it; the last one to leave stops the daemons a fixture
started (never ones it found running).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from reconciler.model import Image

LIBVIRT_SOCK = Path("/run/libvirt/libvirt-sock")
VIRTLOGD_SOCK = Path("/run/libvirt/virtlogd-sock")
STATE = Path("/run/proxyfleet-it")


def socket_answers(path: Path) -> bool:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(2)
        sock.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        sock.close()


def wait_for(check: object, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextlib.contextmanager
def _state_lock() -> Iterator[None]:
    STATE.mkdir(mode=0o700, exist_ok=True)
    (STATE / "users").mkdir(exist_ok=True)
    with (STATE / "lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and ") Z " not in stat.read_text()


_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def _start_daemon(argv: list[str], log: Path) -> int:
    """Start a daemon in the foreground of its own session; keep the handle to reap it."""
    with log.open("ab") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc.pid


def kvm_device_like_udev() -> None:
    """Give /dev/kvm the owner and mode udev gives it on a normal Debian host (root:kvm 0660).

    Machines without udev (containers, microVMs) leave it root:root 0600; then
    libvirt finds KVM "not available" to the QEMU user, declares its QEMU
    capabilities cache stale on every lookup and re-probes QEMU several times
    per call (about 48 s per virDomainDefineXML here).
    """
    kvm = Path("/dev/kvm")
    if not kvm.exists():
        return
    st = kvm.stat()
    if st.st_gid == 0 and (st.st_mode & 0o060) == 0:
        subprocess.run(["chgrp", "kvm", str(kvm)], check=True)
        kvm.chmod(0o660)


@contextlib.contextmanager
def libvirt_daemons() -> Iterator[None]:
    """libvirtd and virtlogd serving the system sockets for the duration."""
    me = STATE / "users" / str(os.getpid())
    kvm_device_like_udev()
    with _state_lock():
        started = STATE / "started"
        pids: list[int] = []
        if not socket_answers(VIRTLOGD_SOCK):
            pids.append(_start_daemon(["/usr/sbin/virtlogd"], STATE / "virtlogd.log"))
            wait_for(lambda: socket_answers(VIRTLOGD_SOCK), "virtlogd")
        if not socket_answers(LIBVIRT_SOCK):
            pids.append(_start_daemon(["/usr/sbin/libvirtd"], STATE / "libvirtd.log"))
            wait_for(lambda: socket_answers(LIBVIRT_SOCK), "libvirtd")
        if pids:
            known = started.read_text().split() if started.exists() else []
            started.write_text(" ".join([*known, *map(str, pids)]))
        me.write_text("")
    try:
        yield
    finally:
        with _state_lock():
            me.unlink(missing_ok=True)
            others = [p for p in (STATE / "users").iterdir() if _alive(int(p.name))]
            started = STATE / "started"
            if not others and started.exists():
                for pid in map(int, started.read_text().split()):
                    if _alive(pid):
                        os.kill(pid, signal.SIGTERM)
                    if pid in _CHILDREN:
                        _CHILDREN.pop(pid).wait(timeout=30)
                started.unlink()


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (sshd forks per connection and setsid()s)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


@dataclass(frozen=True)
class BlankImage:
    """A local image file and the Image that names it."""

    image: Image
    path: Path
    sha256: str


@dataclass
class SshKeys:
    dir: Path
    host_key: Path
    client_key: Path
    known_hosts: Path


def make_keys(base: Path) -> SshKeys:
    base.mkdir(parents=True, exist_ok=True)
    os.chmod(base, 0o700)
    host_key, client_key = base / "ssh_host_ed25519_key", base / "id_ed25519"
    for key in (host_key, client_key):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "proxyfleet-it", "-f", str(key)],
            check=True,
        )
    shutil.copy(client_key.with_suffix(".pub"), base / "authorized_keys")
    return SshKeys(base, host_key, client_key, base / "known_hosts")


class Sshd:
    """An OpenSSH server on 127.0.0.1:<port> with its own config and host key."""

    def __init__(self, keys: SshKeys, *, name: str, streamlocal: bool = True) -> None:
        self.keys = keys
        self.port = free_port()
        self.config = keys.dir / f"sshd_config.{name}"
        self.log = keys.dir / f"sshd.{name}.log"
        self.config.write_text(
            "\n".join(
                [
                    f"Port {self.port}",
                    "ListenAddress 127.0.0.1",
                    f"HostKey {keys.host_key}",
                    f"PidFile {keys.dir}/sshd.{name}.pid",
                    f"AuthorizedKeysFile {keys.dir}/authorized_keys",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "UsePAM no",
                    "StrictModes no",
                    f"AllowStreamLocalForwarding {'yes' if streamlocal else 'no'}",
                    # "no" would also empty sshd's permitted-open list and
                    # refuse unix-socket forwarding ("request was denied").
                    "AllowTcpForwarding local",
                    "X11Forwarding no",
                    "PrintMotd no",
                    "LogLevel VERBOSE",
                    "",
                ]
            )
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                ["/usr/sbin/sshd", "-D", "-e", "-f", str(self.config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        wait_for(self._listening, f"sshd on port {self.port}", timeout=15)

    def _listening(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"sshd exited: {self.log.read_text()[-2000:]}")
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def sessions(self) -> list[int]:
        return descendants(self.proc.pid) if self.proc is not None else []

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """Every session it forked so far stopped (SIGSTOP) inside the block, resumed after:
        a host whose sshd holds the connection open and answers nothing."""
        frozen = self.sessions()
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            for pid in frozen:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)

    def stop(self) -> None:
        """Stop the listener and every session it forked (a real restart drops them too)."""
        if self.proc is None:
            return
        victims = [self.proc.pid, *self.sessions()]
        for pid in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def keyscan(self, target: Path) -> None:
        """known_hosts the way docs/hosts.md tells operators: ssh-keyscan on the dialled port."""
        out = subprocess.run(
            ["ssh-keyscan", "-p", str(self.port), "-t", "ed25519", "127.0.0.1"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        if "ssh-ed25519" not in out:
            raise RuntimeError(f"ssh-keyscan returned nothing for port {self.port}")
        with target.open("a") as fh:
            fh.write(out)
