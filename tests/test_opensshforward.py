"""The ``ssh`` child of ``ssh.libvirtTransport: openssh``: its command line and its failures."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from reconciler.adapters.hypervisor.opensshforward import OpenSshForward, ssh_command
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
        with pytest.raises(TransientError, match="exited \\(255\\): Host key verification failed"):
            forward.prepare()
    finally:
        forward.close()


def test_an_ssh_that_never_listens_is_stopped_at_the_connect_timeout(tmp_path: Path) -> None:
    binary = fake_ssh(tmp_path, "echo $$ > " + str(tmp_path / "pid") + "\nexec sleep 30")
    forward = OpenSshForward(HOST, settings(tmp_path, connect_timeout=0.5), binary=binary)
    try:
        with pytest.raises(TransientError, match=r"did not listen within 0\.5 s"):
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
