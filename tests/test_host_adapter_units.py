"""The host adapter's pure parts: keys, host keys, error classification, addresses, markers."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import libvirt
import paramiko
import pytest

from reconciler.adapters.hypervisor.hostcheck.check import bridge_mac_note
from reconciler.adapters.hypervisor.images.baseimage import marker_line, parse_marker
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.adapters.hypervisor.observe.addresses import domain_addresses, usable_ipv4
from reconciler.adapters.hypervisor.transport.libvirterrors import classify, code_name
from reconciler.adapters.hypervisor.transport.ssh import (
    SshConnection,
    check_host_key,
    fingerprint,
    load_private_key,
)
from reconciler.adapters.hypervisor.transport.sshbridge import SocketBridge
from reconciler.adapters.hypervisor.transport.sshpaths import known_hosts_name
from reconciler.errors import NotFoundError, PermanentError, TransientError
from reconciler.model import Host, HostNetwork, Image
from reconciler.model.settings import SshSettings
from reconciler.ports.hypervisor import Hypervisor


def keygen(path: Path, *, passphrase: str = "") -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", passphrase, "-f", str(path)], check=True
    )
    return path


def libvirt_error(
    code: int, domain: int = libvirt.VIR_FROM_QEMU, *, message: str = ""
) -> libvirt.libvirtError:
    exc = libvirt.libvirtError("failed")
    exc.err = (code, domain, message or f"message for {code}", 2, None, None, None, 0, 0)
    return exc


def test_libvirt_host_satisfies_the_hypervisor_protocol() -> None:
    host = Host(name="kvm1", address="10.0.0.1", zone="z", network=HostNetwork("bridge", "br0"))
    adapter: Hypervisor = LibvirtHost(host, SshSettings())

    assert adapter.name == "kvm1"
    adapter.close()


def test_the_fingerprint_is_the_one_ssh_keygen_prints(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k")
    expected = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", f"{key}.pub"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[1]

    assert fingerprint(paramiko.PKey.from_path(key)) == expected


def test_known_hosts_names_carry_the_port_unless_it_is_22() -> None:
    assert known_hosts_name("10.0.0.5", 22) == "10.0.0.5"
    assert known_hosts_name("10.0.0.5", 2222) == "[10.0.0.5]:2222"


def test_a_missing_private_key_is_transient(tmp_path: Path) -> None:
    with pytest.raises(TransientError, match="does not exist"):
        load_private_key(tmp_path / "absent", host="kvm1")


def test_a_private_key_readable_by_group_is_permanent(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k")
    key.chmod(0o640)

    with pytest.raises(PermanentError, match="0640"):
        load_private_key(key, host="kvm1")


def test_a_private_key_that_does_not_parse_is_permanent(tmp_path: Path) -> None:
    key = tmp_path / "k"
    key.write_text(
        "-----BEGIN OPENSSH PRIVATE KEY-----\ngarbage\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    key.chmod(0o600)

    with pytest.raises(PermanentError, match="cannot be parsed"):
        load_private_key(key, host="kvm1")


def test_a_passphrase_protected_key_is_permanent(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k", passphrase="secret-words")

    with pytest.raises(PermanentError, match="passphrase"):
        load_private_key(key, host="kvm1")


def test_a_good_private_key_loads(tmp_path: Path) -> None:
    key = keygen(tmp_path / "k")

    assert load_private_key(key, host="kvm1").get_name() == "ssh-ed25519"


def test_host_keys_are_checked_strictly_and_errors_name_the_offered_fingerprint(
    tmp_path: Path,
) -> None:
    good = paramiko.PKey.from_path(keygen(tmp_path / "good"))
    other = paramiko.PKey.from_path(keygen(tmp_path / "other"))
    known_hosts = tmp_path / "known_hosts"

    def check(known: dict[str, paramiko.PKey]) -> None:
        check_host_key(known, good, name="[10.0.0.5]:2222", known_hosts=known_hosts, host="kvm1")

    check({"ssh-ed25519": good})
    with pytest.raises(PermanentError, match="HOST KEY CHANGED") as changed:
        check({"ssh-ed25519": other})
    with pytest.raises(PermanentError, match="is not in") as unknown:
        check({})

    for caught in (changed, unknown):
        assert fingerprint(good) in str(caught.value)
        assert "[10.0.0.5]:2222" in str(caught.value)


@pytest.mark.parametrize(
    ("code", "domain", "kind"),
    [
        (libvirt.VIR_ERR_NO_DOMAIN, libvirt.VIR_FROM_QEMU, NotFoundError),
        (libvirt.VIR_ERR_NO_STORAGE_VOL, libvirt.VIR_FROM_STORAGE, NotFoundError),
        (libvirt.VIR_ERR_SYSTEM_ERROR, libvirt.VIR_FROM_RPC, TransientError),
        (libvirt.VIR_ERR_RPC, libvirt.VIR_FROM_RPC, TransientError),
        (libvirt.VIR_ERR_AGENT_UNRESPONSIVE, libvirt.VIR_FROM_QEMU, TransientError),
        (libvirt.VIR_ERR_XML_ERROR, libvirt.VIR_FROM_DOMAIN, PermanentError),
        (libvirt.VIR_ERR_OPERATION_INVALID, libvirt.VIR_FROM_QEMU, PermanentError),
        (libvirt.VIR_ERR_NO_STORAGE_POOL, libvirt.VIR_FROM_STORAGE, PermanentError),
        # "client socket is closed": a handle of a connection dropped since (libvirtd restart)
        (libvirt.VIR_ERR_INTERNAL_ERROR, libvirt.VIR_FROM_RPC, TransientError),
        (libvirt.VIR_ERR_INTERNAL_ERROR, libvirt.VIR_FROM_QEMU, PermanentError),
    ],
)
def test_libvirt_errors_are_classified_once_with_their_code_and_name(
    code: int, domain: int, kind: type[Exception]
) -> None:
    error = classify(libvirt_error(code, domain), host="kvm1", rpc="virX", link_alive=True)

    assert type(error) is kind
    assert error.code == code
    assert error.code_name == code_name(code)
    assert error.code_name in str(error)
    assert "host kvm1: virX" in str(error)


def test_any_error_on_a_dead_connection_is_transient() -> None:
    error = classify(
        libvirt_error(libvirt.VIR_ERR_INTERNAL_ERROR), host="kvm1", rpc="virX", link_alive=False
    )

    assert isinstance(error, TransientError)
    assert error.code_name == "VIR_ERR_INTERNAL_ERROR"


def test_code_names_are_the_libvirt_constants() -> None:
    assert code_name(libvirt.VIR_ERR_NO_DOMAIN) == "VIR_ERR_NO_DOMAIN"
    assert code_name(libvirt.VIR_ERR_INTERNAL_ERROR) == "VIR_ERR_INTERNAL_ERROR"
    assert code_name(None) == "VIR_ERR_UNKNOWN"


def test_addresses_keep_ipv4_only_without_loopback_or_link_local() -> None:
    ipv4, ipv6 = libvirt.VIR_IP_ADDR_TYPE_IPV4, libvirt.VIR_IP_ADDR_TYPE_IPV6
    found = {
        "lo": {"addrs": [{"type": ipv4, "addr": "127.0.0.1", "prefix": 8}]},
        "eth0": {
            "addrs": [
                {"type": ipv6, "addr": "fe80::1", "prefix": 64},
                {"type": ipv4, "addr": "169.254.3.4", "prefix": 16},
                {"type": ipv4, "addr": "192.168.122.10", "prefix": 24},
                {"type": ipv4, "addr": "192.168.122.10", "prefix": 24},
            ]
        },
        "eth1": {"addrs": [{"type": ipv4, "addr": "10.1.2.3", "prefix": 8}]},
        "eth2": {"addrs": None},
    }

    assert usable_ipv4(found) == ("192.168.122.10", "10.1.2.3")


class AddressSession:
    """Just enough of a LibvirtSession for domain_addresses: calls run at once."""

    host = Host(name="kvm1", address="h", zone="z", network=HostNetwork("network", "lab"))

    def call(self, rpc: str, fn: Any, **_ids: object) -> Any:
        try:
            return fn(None)
        except libvirt.libvirtError as exc:
            raise classify(exc, host="kvm1", rpc=rpc, link_alive=True) from exc

    def trace(self, *_args: object, **_ids: object) -> None:
        return None

    def read_host_file(self, path: str, **_kw: object) -> str | None:
        pytest.fail(f"{path} must not be read when libvirt gave an address")


class AgentlessDomain:
    """A running domain whose guest runs no agent and whose NIC has a libvirt DHCP lease."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def isActive(self) -> bool:
        return True

    def interfaceAddresses(self, source: int, _flags: int) -> dict[str, Any]:
        self.asked.append(source)
        if source == libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT:
            raise libvirt_error(libvirt.VIR_ERR_AGENT_UNRESPONSIVE)
        ipv4 = libvirt.VIR_IP_ADDR_TYPE_IPV4
        lease = source == libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE
        addr = "10.80.1.23" if lease else "10.80.1.99"
        return {"vnet0": {"addrs": [{"type": ipv4, "addr": addr, "prefix": 24}]}}


def test_without_an_agent_the_dhcp_lease_answers_before_arp_is_asked() -> None:
    dom = AgentlessDomain()

    assert domain_addresses(AddressSession(), dom, "pf-x") == ("10.80.1.23",)  # type: ignore[arg-type]
    assert dom.asked == [
        libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT,
        libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_LEASE,
    ]


class BridgedAgentlessDomain:
    """A running domain on a bridge, no agent, no lease, libvirt's ARP reader broken (the
    kernel-6.10 ``wrong nlmsg len``): only the host's /proc/net/arp can say."""

    def isActive(self) -> bool:
        return True

    def interfaceAddresses(self, source: int, _flags: int) -> dict[str, Any]:
        if source == libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_AGENT:
            raise libvirt_error(libvirt.VIR_ERR_AGENT_UNRESPONSIVE)
        if source == libvirt.VIR_DOMAIN_INTERFACE_ADDRESSES_SRC_ARP:
            raise libvirt_error(libvirt.VIR_ERR_INTERNAL_ERROR, message="wrong nlmsg len")
        return {}

    def XMLDesc(self, _flags: int) -> str:
        mac = "<mac address='52:54:00:d8:20:40'/>"
        return f"<domain><devices><interface>{mac}</interface></devices></domain>"


class ArpSession(AddressSession):
    def __init__(self, table: str | None) -> None:
        self.table = table

    def read_host_file(self, path: str, **_kw: object) -> str | None:
        assert path == "/proc/net/arp"
        return self.table


ARP_HEADER = "IP address       HW type     Flags       HW address            Mask     Device\n"


@pytest.mark.parametrize(
    ("table", "found", "said"),
    [
        (
            ARP_HEADER + "10.78.12.115 0x1 0x2 52:54:00:d8:20:40 * br0\n",
            ("10.78.12.115",),
            "from the host's ARP table: 10.78.12.115",
        ),
        (ARP_HEADER, (), "no complete entry for pf-x (MAC 52:54:00:d8:20:40): no entry at all"),
        (
            ARP_HEADER + "10.78.12.115 0x1 0x0 52:54:00:d8:20:40 * br0\n",
            (),
            "10.78.12.115 0x1 0x0 52:54:00:d8:20:40 * br0",
        ),
        (None, (), "its ARP table /proc/net/arp could not be read for pf-x"),
    ],
)
def test_the_arp_fallback_gives_the_complete_entry_or_says_at_debug_why_it_found_none(
    table: str | None, found: tuple[str, ...], said: str, caplog: pytest.LogCaptureFixture
) -> None:
    """After a bridge's MAC changed the kernel's ARP table is empty (seen on the lab): the
    log then says so, not only that no address was found."""
    caplog.set_level("DEBUG", logger="reconciler.host")
    assert domain_addresses(ArpSession(table), BridgedAgentlessDomain(), "pf-x") == found  # type: ignore[arg-type]
    assert said in caplog.text


def test_a_marker_is_a_sha256sum_line_and_only_a_complete_one_counts() -> None:
    image = Image(key="debian-12", url="https://example.test/x.qcow2")
    line = marker_line("ab" * 32, image)

    assert line == f"{'ab' * 32}  base-debian-12.qcow2\n".encode()
    assert parse_marker(line) == "ab" * 32
    assert parse_marker(line[:40]) is None
    assert parse_marker(line.rstrip(b"\n")) is None
    assert parse_marker(b"\0" * 80) is None


def test_a_server_that_never_speaks_ssh_fails_transient_at_the_connect_deadline(
    tmp_path: Path,
) -> None:
    key = keygen(tmp_path / "k")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        host = Host(
            name="mute",
            address="127.0.0.1",
            port=silent.getsockname()[1],
            zone="z",
            network=HostNetwork("bridge", "br0"),
        )
        settings = SshSettings(key_file=key, known_hosts_file=tmp_path / "kh", connect_timeout=1.0)
        (tmp_path / "kh").write_text("")
        connection = SshConnection(host, settings)
        started = time.monotonic()

        with pytest.raises(TransientError, match="handshake"):
            connection.transport()

    assert time.monotonic() - started < 30, "the connect deadline must end the wait"


def test_a_socket_directory_that_cannot_be_made_is_permanent_and_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "no" / "such" / "dir"
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(missing))

    with pytest.raises(PermanentError, match=str(missing)):
        SocketBridge(lambda: pytest.fail("no channel may be opened"), label="kvm1")


def test_the_bridge_socket_is_private_and_removed_on_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path))
    bridge = SocketBridge(lambda: pytest.fail("no channel may be opened"), label="kvm1")
    directory = Path(bridge.path).parent

    assert directory.parent == tmp_path
    assert directory.stat().st_mode & 0o777 == 0o700
    assert bridge.uri == f"qemu+unix:///system?socket={bridge.path}"
    bridge.close()
    assert not directory.exists()


def test_closing_the_bridge_does_not_wait_out_the_acceptors_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The acceptor selects with a 0.5 s timeout; close() used to wait for it to run out.
    monkeypatch.setenv("RUNTIME_DIRECTORY", str(tmp_path))
    seconds = []
    for _ in range(3):
        bridge = SocketBridge(lambda: pytest.fail("no channel may be opened"), label="kvm1")
        time.sleep(0.05)  # the acceptor is in its select
        started = time.monotonic()
        bridge.close()
        seconds.append(time.monotonic() - started)
    assert min(seconds) < 0.1, seconds


def test_a_full_pool_is_permanent_for_the_run_though_libvirt_calls_it_a_system_error() -> None:
    error = classify(
        libvirt_error(
            libvirt.VIR_ERR_SYSTEM_ERROR,
            libvirt.VIR_FROM_STORAGE,
            message="cannot write to '/var/lib/libvirt/images/base': No space left on device",
        ),
        host="kvm1",
        rpc="virStorageVolUpload",
        link_alive=True,
    )

    assert isinstance(error, PermanentError)
    assert "No space left on device" in str(error)


class SysfsSession:
    """A session whose host answers file reads from a dict (None: the host did not say)."""

    def __init__(self, files: dict[str, str | None]) -> None:
        self.files = files

    def read_host_file(self, path: str, **_kw: object) -> str | None:
        return self.files.get(path)


@pytest.mark.parametrize(
    ("address", "assign", "warned"),
    [
        ("fe:54:00:1a:d1:98\n", "1\n", True),  # follows a guest's tap (seen on the lab)
        ("fe:54:00:1a:d1:98\n", "3\n", False),  # set by hand to that very value: kept
        ("02:70:66:00:00:0b\n", "3\n", False),  # set by hand
        ("00:1b:21:3a:4f:10\n", "0\n", False),  # a physical port's, lower than any tap
        (None, "1\n", False),  # the host did not say
    ],
)
def test_a_bridge_whose_mac_is_a_guest_taps_gets_a_warning_that_says_what_to_do(
    address: str | None, assign: str, warned: bool
) -> None:
    session = SysfsSession(
        {"/sys/class/net/br0/address": address, "/sys/class/net/br0/addr_assign_type": assign}
    )
    note = bridge_mac_note(session, "br0")  # type: ignore[arg-type]
    assert bool(note) is warned
    if warned:
        assert "fe:54:00:1a:d1:98" in note and "ARP table" in note
        assert "ip link set br0 address" in note
