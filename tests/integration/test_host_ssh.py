"""The SSH link against a real OpenSSH sshd: redial, host keys, key loading, fallback, deadline."""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hostservices import Sshd, SshKeys, make_keys

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.errors import PermanentError, TransientError
from reconciler.model import Host
from reconciler.model.settings import SshSettings

# A pump or watchdog thread dying with an exception is a bug, not noise.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def server_fingerprint(keys: SshKeys) -> str:
    out = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", f"{keys.host_key}.pub"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return out.split()[1]


def host_on(host: Host, server: Sshd) -> Host:
    return replace(host, port=server.port)


def settings_for(settings: SshSettings, keys: SshKeys) -> SshSettings:
    return replace(settings, key_file=keys.client_key, known_hosts_file=keys.known_hosts)


def test_after_sshd_restarts_mid_session_the_next_call_redials(
    own_sshd: Callable[..., Sshd],
    make_host: Callable[..., LibvirtHost],
    host: Host,
    settings: SshSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="reconciler.ssh")
    server = own_sshd()
    adapter = make_host(host_on(host, server), settings_for(settings, server.keys))
    adapter.observe()

    server.restart()
    inventory = adapter.observe()

    assert inventory.reachable
    connects = [r for r in caplog.records if r.getMessage().startswith("SSH connected")]
    assert len(connects) == 2


def test_a_changed_host_key_is_refused_naming_the_fingerprint_the_server_offered(
    sshd: Sshd,
    ssh_keys: SshKeys,
    make_host: Callable[..., LibvirtHost],
    settings: SshSettings,
    tmp_path: Path,
) -> None:
    impostor = make_keys(tmp_path / "impostor")
    known = tmp_path / "known_hosts"
    public = impostor.host_key.with_suffix(".pub").read_text().split()
    known.write_text(f"[127.0.0.1]:{sshd.port} {public[0]} {public[1]}\n")
    adapter = make_host(ssh=replace(settings, known_hosts_file=known))

    with pytest.raises(PermanentError) as caught:
        adapter.observe()

    assert "HOST KEY CHANGED" in str(caught.value)
    assert server_fingerprint(ssh_keys) in str(caught.value)
    assert f"[127.0.0.1]:{sshd.port}" in str(caught.value)


def test_a_host_missing_from_known_hosts_is_refused_even_when_listed_for_another_port(
    sshd: Sshd,
    ssh_keys: SshKeys,
    make_host: Callable[..., LibvirtHost],
    settings: SshSettings,
    tmp_path: Path,
) -> None:
    known = tmp_path / "known_hosts"
    entry = ssh_keys.known_hosts.read_text().splitlines()[0].split(" ", 1)[1]
    known.write_text(f"127.0.0.1 {entry}\n[127.0.0.1]:{sshd.port + 1} {entry}\n")
    adapter = make_host(ssh=replace(settings, known_hosts_file=known))

    with pytest.raises(PermanentError, match="is not in") as caught:
        adapter.observe()

    assert server_fingerprint(ssh_keys) in str(caught.value)


def test_a_missing_key_file_is_transient_and_the_same_adapter_heals_once_it_appears(
    ssh_keys: SshKeys,
    make_host: Callable[..., LibvirtHost],
    settings: SshSettings,
    tmp_path: Path,
) -> None:
    key = tmp_path / "later" / "id_ed25519"
    adapter = make_host(ssh=replace(settings, key_file=key))

    with pytest.raises(TransientError, match="does not exist"):
        adapter.observe()
    key.parent.mkdir()
    shutil.copy(ssh_keys.client_key, key)
    key.chmod(0o600)

    assert adapter.observe().reachable


def test_a_key_readable_by_others_is_permanent(
    ssh_keys: SshKeys,
    make_host: Callable[..., LibvirtHost],
    settings: SshSettings,
    tmp_path: Path,
) -> None:
    key = tmp_path / "id_ed25519"
    shutil.copy(ssh_keys.client_key, key)
    key.chmod(0o644)
    adapter = make_host(ssh=replace(settings, key_file=key))

    with pytest.raises(PermanentError, match="0644"):
        adapter.observe()


def test_a_server_that_refuses_streamlocal_is_used_through_virt_ssh_helper(
    own_sshd: Callable[..., Sshd],
    make_host: Callable[..., LibvirtHost],
    host: Host,
    settings: SshSettings,
) -> None:
    server = own_sshd(streamlocal=False)
    adapter = make_host(host_on(host, server), settings_for(settings, server.keys))

    inventory = adapter.observe()
    report = adapter.host_check(kvm_probe=False)

    assert inventory.reachable
    assert report.ok, report.items
    assert "via virt-ssh-helper" in report.items[0].detail
    assert "AllowStreamLocalForwarding no" in server.config.read_text()


def test_a_call_without_answer_fails_transient_at_its_deadline_and_the_next_call_redials(
    own_sshd: Callable[..., Sshd],
    make_host: Callable[..., LibvirtHost],
    host: Host,
    settings: SshSettings,
) -> None:
    server = own_sshd()
    adapter = make_host(
        host_on(host, server), replace(settings_for(settings, server.keys), call_timeout=3.0)
    )
    adapter.observe()
    with server.frozen(), pytest.raises(TransientError, match="no answer within 3 s"):
        adapter.observe()

    assert adapter.observe().reachable


def test_a_missing_libvirt_socket_is_transient_and_never_switches_to_the_helper(
    make_host: Callable[..., LibvirtHost], host: Host
) -> None:
    # What a libvirtd restart looks like from here: sshd says "Connect failed" as it
    # does for refused forwarding, but the socket is not there.
    adapter = make_host(replace(host, socket="/run/libvirt/restarting-sock"))

    with pytest.raises(TransientError) as raised:
        adapter.observe()

    assert "is missing on" in str(raised.value)
    assert "libvirtd stopped or restarting" in str(raised.value)
    assert adapter.session.via == "streamlocal"


def test_a_libvirt_socket_nobody_listens_on_is_transient_and_never_switches_to_the_helper(
    make_host: Callable[..., LibvirtHost], host: Host, tmp_path: Path
) -> None:
    # What a killed libvirtd leaves behind (and a restart until the new one listens): the
    # socket file is there, nothing accepts on it, sshd says "Connect failed". The helper
    # would reach the real libvirtd and hide it; this is no refused forwarding either.
    stale = tmp_path / "stale-sock"
    with socket.socket(socket.AF_UNIX) as left:
        left.bind(str(stale))
    assert stale.is_socket()
    adapter = make_host(replace(host, socket=str(stale)))

    with pytest.raises(TransientError) as raised:
        adapter.observe()

    assert f"{stale} has no listener on" in str(raised.value)
    assert adapter.session.via == "streamlocal"
