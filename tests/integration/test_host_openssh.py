"""``ssh.libvirtTransport: openssh``: libvirt's bytes carried by an ``ssh -N -L`` child."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hostservices import Sshd
from test_host_images import random_image

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.errors import TransientError
from reconciler.model import Host
from reconciler.model.settings import SshSettings
from reconciler.model.vm import base_volume_name

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def ssh_children() -> dict[int, str]:
    """This process's ``ssh`` children and their command lines."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError):
            stat = (proc / "stat").read_text()
            if stat.split(") ", 1)[1].split()[1] != str(os.getpid()):
                continue
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if Path(argv[0].decode()).name == "ssh":
                found[int(proc.name)] = " ".join(a.decode() for a in argv)
    return found


def gone(pid: int, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while Path(f"/proc/{pid}").exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def trusting(settings: SshSettings, server: Sshd) -> SshSettings:
    """``settings`` with the client key and known_hosts of ``server``."""
    return replace(
        settings, key_file=server.keys.client_key, known_hosts_file=server.keys.known_hosts
    )


def served(
    make_host: Callable[..., LibvirtHost], host: Host, settings: SshSettings, server: Sshd
) -> LibvirtHost:
    """An adapter for ``host`` reached through ``server``, trusting its key."""
    return make_host(replace(host, port=server.port), trusting(settings, server))


@pytest.fixture
def openssh(settings: SshSettings) -> SshSettings:
    return replace(settings, libvirt_transport="openssh")


def test_an_upload_runs_through_one_strict_ssh_child_that_close_ends(
    make_host: Callable[..., LibvirtHost],
    openssh: SshSettings,
    pool: tuple[str, Path],
    tmp_path: Path,
) -> None:
    img = random_image(tmp_path, megabytes=8)
    before = set(ssh_children())
    adapter = make_host(ssh=openssh)

    adapter.ensure_image(img.image, img.path)

    assert adapter.session.via == "openssh-streamlocal"
    assert (pool[1] / base_volume_name(img.image)).read_bytes() == img.path.read_bytes()
    children = {pid: cmd for pid, cmd in ssh_children().items() if pid not in before}
    assert len(children) == 1, children
    [(pid, command)] = children.items()
    for option in (
        "-F /dev/null",
        "StrictHostKeyChecking=yes",
        f"UserKnownHostsFile={openssh.known_hosts_file}",
        "IdentityAgent=none",
        "ForwardAgent=no",
        "ForwardX11=no",
    ):
        assert option in command
    socket_dir = Path(command.split(" -L ", 1)[1].split(":", 1)[0]).parent
    assert socket_dir.stat().st_mode & 0o777 == 0o700

    adapter.close()

    assert gone(pid)
    assert not socket_dir.exists()


def test_a_call_without_answer_ends_the_ssh_child_at_its_deadline_and_the_next_call_redials(
    own_sshd: Callable[..., Sshd],
    make_host: Callable[..., LibvirtHost],
    host: Host,
    openssh: SshSettings,
) -> None:
    server = own_sshd()
    ssh = replace(
        openssh,
        key_file=server.keys.client_key,
        known_hosts_file=server.keys.known_hosts,
        call_timeout=3.0,
    )
    before = set(ssh_children())
    adapter = make_host(replace(host, port=server.port), ssh)
    adapter.observe()
    [first] = set(ssh_children()) - before
    with server.frozen(), pytest.raises(TransientError, match="no answer within 3 s"):
        adapter.observe()

    assert gone(first)
    assert adapter.observe().reachable
    assert adapter.session.via == "openssh-streamlocal"
    assert len(set(ssh_children()) - before) == 1


def test_a_server_that_refuses_streamlocal_keeps_the_virt_ssh_helper_and_leaves_no_ssh_running(
    own_sshd: Callable[..., Sshd],
    make_host: Callable[..., LibvirtHost],
    host: Host,
    openssh: SshSettings,
) -> None:
    server = own_sshd(streamlocal=False)
    before = set(ssh_children())
    adapter = served(make_host, host, openssh, server)

    assert adapter.observe().reachable
    assert adapter.session.via == "virt-ssh-helper"
    assert set(ssh_children()) == before


def logins(server: Sshd) -> int:
    """Public-key logins the server accepted so far (sshd's VERBOSE log)."""
    return server.log.read_text().count("Accepted publickey")


def test_a_dial_that_works_is_one_ssh_login_and_the_link_dials_only_for_a_remote_read(
    own_sshd: Callable[..., Sshd],
    make_host: Callable[..., LibvirtHost],
    host: Host,
    openssh: SshSettings,
) -> None:
    server = own_sshd()
    adapter = served(make_host, host, openssh, server)

    assert adapter.observe().reachable
    assert adapter.observe().reachable
    assert logins(server) == 1

    assert adapter.session.read_host_file("/proc/version") is not None
    assert logins(server) == 2


def test_an_observe_over_openssh_loads_no_paramiko(
    own_sshd: Callable[..., Sshd], host: Host, openssh: SshSettings, tmp_path: Path
) -> None:
    server = own_sshd()
    script = tmp_path / "observe.py"
    script.write_text(
        "import sys\n"
        "from pathlib import Path\n"
        "from reconciler.adapters.hypervisor.libvirthost import LibvirtHost\n"
        "from reconciler.model import Host, HostNetwork\n"
        "from reconciler.model.settings import SshSettings\n"
        f"host = Host(name='it1', address='127.0.0.1', port={server.port}, zone='z1',\n"
        f"            network=HostNetwork('network', {host.network.name!r}), pool={host.pool!r})\n"
        f"ssh = SshSettings(key_file=Path({str(server.keys.client_key)!r}),\n"
        f"                  known_hosts_file=Path({str(server.keys.known_hosts)!r}))\n"
        "adapter = LibvirtHost(host, ssh)\n"
        "assert adapter.observe().reachable\n"
        "print('paramiko' in sys.modules)\n"
        "adapter.close()\n"
    )

    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )

    assert out.stdout.strip() == "False", out.stderr
    assert logins(server) == 1


def test_dialling_ahead_starts_the_ssh_child_that_the_next_call_then_uses(
    own_sshd: Callable[..., Sshd],
    make_host: Callable[..., LibvirtHost],
    host: Host,
    openssh: SshSettings,
) -> None:
    server = own_sshd()
    before = set(ssh_children())
    adapter = served(make_host, host, openssh, server)

    adapter.dial_ahead()
    started = set(ssh_children()) - before
    assert len(started) == 1

    assert adapter.observe().reachable
    assert set(ssh_children()) - before == started
    assert logins(server) == 1
