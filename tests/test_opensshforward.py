"""The ``ssh`` child of ``ssh.libvirtTransport: openssh``: its command line and its failures."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from reconciler.adapters.hypervisor.transport.opensshforward import (
    OpenSshForward,
    SshUnreachable,
    listening,
    ssh_command,
)
from reconciler.errors import PermanentError, TransientError
from reconciler.model import Host, HostNetwork
from reconciler.model.settings import SshSettings

HOST = Host(
    name="kvm01",
    address="10.0.0.5",
    zone="a",
    network=HostNetwork("bridge", "br0"),
    port=2222,
    user="pf",
)


def settings(tmp_path: Path, **changes: float) -> SshSettings:
    return SshSettings(
        key_file=tmp_path / "id_ed25519",
        known_hosts_file=tmp_path / "known_hosts",
        libvirt_transport="openssh",
        **changes,  # type: ignore[arg-type]
    )


def options(argv: list[str]) -> dict[str, str]:
    pairs = [argv[i + 1] for i, arg in enumerate(argv) if arg == "-o"]
    return dict(pair.split("=", 1) for pair in pairs)


def test_the_command_reads_no_ssh_config_and_checks_the_host_key_strictly_against_our_file(
    tmp_path: Path,
) -> None:
    argv = ssh_command(HOST, settings(tmp_path), "/run/x/libvirt-sock", binary="ssh")
    opts = options(argv)

    assert argv[:3] == ["ssh", "-F", "/dev/null"]
    assert opts["StrictHostKeyChecking"] == "yes"
    assert opts["UserKnownHostsFile"] == str(tmp_path / "known_hosts")
    assert opts["GlobalKnownHostsFile"] == "/dev/null"
    assert opts["UpdateHostKeys"] == "no"
    assert opts["BatchMode"] == "yes"
    # Looked up as the paramiko link does: a line for port 22 is not this host's key.
    assert opts["HostKeyAlias"] == "[10.0.0.5]:2222"


def test_the_command_offers_only_the_key_file_and_forwards_nothing_of_this_machine(
    tmp_path: Path,
) -> None:
    argv = ssh_command(HOST, settings(tmp_path), "/run/x/libvirt-sock", binary="ssh")
    opts = options(argv)

    assert argv[argv.index("-i") + 1] == str(tmp_path / "id_ed25519")
    assert opts["IdentitiesOnly"] == "yes"
    assert opts["IdentityAgent"] == "none"
    assert (opts["ForwardAgent"], opts["ForwardX11"], opts["PermitLocalCommand"]) == (
        "no",
        "no",
        "no",
    )
    assert "-N" in argv
    assert opts["ExitOnForwardFailure"] == "yes"
    assert opts["StreamLocalBindMask"] == "0177"


def test_the_command_forwards_the_local_socket_to_the_hosts_libvirt_socket_on_its_port(
    tmp_path: Path,
) -> None:
    argv = ssh_command(
        HOST, settings(tmp_path, connect_timeout=7.5), "/run/x/libvirt-sock", binary="ssh"
    )

    assert argv[argv.index("-L") + 1] == "/run/x/libvirt-sock:/var/run/libvirt/libvirt-sock"
    assert argv[argv.index("-p") + 1] == "2222"
    assert argv[argv.index("-l") + 1] == "pf"
    assert argv[-2:] == ["--", "10.0.0.5"]
    assert options(argv)["ConnectTimeout"] == "7"
    assert options(argv)["Ciphers"].startswith("aes128-gcm@openssh.com,")


def test_a_machine_without_ssh_is_a_permanent_error_naming_the_setting(tmp_path: Path) -> None:
    forward = OpenSshForward(HOST, settings(tmp_path), binary="no-such-ssh-client")
    try:
        with pytest.raises(PermanentError, match=r"ssh\.libvirtTransport openssh needs"):
            forward.prepare()
    finally:
        forward.close()


def fake_ssh(tmp_path: Path, body: str) -> str:
    script = tmp_path / "fake-ssh"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_an_ssh_that_exits_before_listening_is_transient_with_what_it_said(
    tmp_path: Path,
) -> None:
    binary = fake_ssh(tmp_path, "echo 'Host key verification failed.' >&2\nexit 255")
    forward = OpenSshForward(HOST, settings(tmp_path), binary=binary)
    try:
        with pytest.raises(
            TransientError, match="exited \\(255\\): Host key verification failed"
        ) as caught:
            forward.prepare()
        # The session asks the paramiko link why: the child met a server.
        assert not isinstance(caught.value, SshUnreachable)
    finally:
        forward.close()


def test_an_ssh_that_reaches_no_server_is_unreachable_naming_the_host_and_the_reason(
    tmp_path: Path,
) -> None:
    said = "ssh: connect to host 10.0.0.5 port 2222: Connection refused"
    binary = fake_ssh(tmp_path, f"echo '{said}' >&2\nexit 255")
    forward = OpenSshForward(HOST, settings(tmp_path), binary=binary)
    try:
        with pytest.raises(
            SshUnreachable, match=r"cannot reach SSH at \[10\.0\.0\.5\]:2222: Connection refused"
        ):
            forward.prepare()
    finally:
        forward.close()


def test_a_second_child_is_judged_by_what_it_said_not_by_the_first(tmp_path: Path) -> None:
    script = tmp_path / "said"
    script.write_text("echo 'ssh: connect to host 10.0.0.5 port 2222: No route to host' >&2\n")
    binary = fake_ssh(tmp_path, f'. "{script}"\nexit 255')
    forward = OpenSshForward(HOST, settings(tmp_path), binary=binary)
    try:
        with pytest.raises(SshUnreachable):
            forward.prepare()
        script.write_text("echo 'Permission denied (publickey).' >&2\n")
        with pytest.raises(TransientError, match="Permission denied") as caught:
            forward.prepare()
        assert not isinstance(caught.value, SshUnreachable)
    finally:
        forward.close()


def test_an_ssh_that_never_listens_is_stopped_at_the_connect_timeout(tmp_path: Path) -> None:
    binary = fake_ssh(tmp_path, "echo $$ > " + str(tmp_path / "pid") + "\nexec sleep 30")
    forward = OpenSshForward(HOST, settings(tmp_path, connect_timeout=0.5), binary=binary)
    try:
        with pytest.raises(SshUnreachable, match=r"did not listen within 0\.5 s"):
            forward.prepare()
        pid = int((tmp_path / "pid").read_text())
        assert not os.path.exists(f"/proc/{pid}")
    finally:
        forward.close()


def test_close_removes_the_private_socket_directory(tmp_path: Path) -> None:
    forward = OpenSshForward(HOST, settings(tmp_path), binary="no-such-ssh-client")
    directory = Path(forward.path).parent
    assert directory.stat().st_mode & 0o777 == 0o700

    forward.close()

    assert not directory.exists()


def listens_after(seconds: float) -> str:
    """A fake ``ssh`` that writes its pid to $PIDFILE, binds the -L socket at once and
    listens on it ``seconds`` later (as ssh does, bind() then listen()), then sleeps."""
    server = (
        "import socket, sys, time\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.bind(sys.argv[1])\n"
        f"time.sleep({seconds})\n"
        "s.listen()\n"
        "time.sleep(60)\n"
    )
    return (
        'for arg; do case "$arg" in *:/var/run/*) sock="${arg%%:*}";; esac; done\n'
        f'echo $$ > "$PIDFILE"\nexec {sys.executable} -c \'{server}\' "$sock"'
    )


LISTENS = listens_after(0)


def wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not os.path.exists(f"/proc/{pid}") or " Z " in Path(f"/proc/{pid}/stat").read_text():
            return True
        time.sleep(0.05)
    return False


def test_a_child_dialled_on_a_thread_that_ended_keeps_running_until_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PIDFILE", str(tmp_path / "pid"))
    forward = OpenSshForward(HOST, settings(tmp_path), binary=fake_ssh(tmp_path, LISTENS))
    try:
        worker = threading.Thread(target=forward.prepare)
        worker.start()
        worker.join()
        pid = int((tmp_path / "pid").read_text())

        assert not wait_gone(pid, 1.0)
        assert forward.alive
    finally:
        forward.close()
    assert wait_gone(pid)


def test_a_process_killed_with_sigkill_takes_its_ssh_child_with_it(tmp_path: Path) -> None:
    # What no exit hook can do: `kill -9` of a `proxyfleet apply`. The child must not
    # stay behind holding an SSH connection to the host.
    binary = fake_ssh(tmp_path, LISTENS)
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from reconciler.adapters.hypervisor.transport.opensshforward import OpenSshForward\n"
        "from reconciler.model import Host, HostNetwork\n"
        "from reconciler.model.settings import SshSettings\n"
        "host = Host(name='kvm01', address='10.0.0.5', zone='a',"
        " network=HostNetwork('bridge', 'br0'))\n"
        f"settings = SshSettings(key_file=Path({str(tmp_path)!r}) / 'k',"
        f" known_hosts_file=Path({str(tmp_path)!r}) / 'kh')\n"
        f"OpenSshForward(host, settings, binary={binary!r}).prepare()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    env = {**os.environ, "PIDFILE": str(tmp_path / "pid")}
    done = subprocess.run([sys.executable, "-c", script], env=env, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL

    pid = int((tmp_path / "pid").read_text())
    assert wait_gone(pid), f"ssh child {pid} outlived its killed parent"


def test_a_socket_that_exists_but_does_not_listen_yet_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # ssh binds the -L socket (the file appears) before it listens; a connect in between
    # is refused, which a loaded machine showed as a failed virConnectOpen.
    monkeypatch.setenv("PIDFILE", str(tmp_path / "pid"))
    forward = OpenSshForward(
        HOST, settings(tmp_path), binary=fake_ssh(tmp_path, listens_after(1.0))
    )
    try:
        forward.prepare()
        with socket.socket(socket.AF_UNIX) as client:
            client.connect(forward.path)
    finally:
        forward.close()


def test_only_a_listening_socket_counts_as_listening(tmp_path: Path) -> None:
    path = str(tmp_path / "sock")
    assert not listening(path)
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(path)
        assert not listening(path)
        server.listen()
        assert listening(path)
    assert not listening(path)
