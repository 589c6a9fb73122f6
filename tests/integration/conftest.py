"""Fixtures for the host adapter against a real libvirtd through a real sshd.

Session scope: libvirtd + virtlogd (started unless already serving), one
sshd on 127.0.0.1:<free port> with generated host and client keys and a
known_hosts made with ssh-keyscan, a dir storage pool in a fresh directory
and an isolated libvirt network with its own bridge, all removed afterwards.
Every test in this directory is marked ``integration``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest
from etcdcluster import EtcdCluster
from hostservices import BlankImage, Sshd, SshKeys, libvirt_daemons, make_keys

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.model import (
    CloudInit,
    DomainType,
    Firmware,
    Host,
    HostNetwork,
    Image,
    ImageFormat,
    MachineType,
    Owner,
)
from reconciler.model.settings import SshSettings
from reconciler.model.vm import VmSpec

LOCAL_URI = "qemu:///system"
FLEET = "it"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[EtcdCluster]:
    """A real 3-member etcd cluster on 127.0.0.1 (the fleet lock's and ring's tests)."""
    cluster = EtcdCluster(tmp_path / "etcd", size=3)
    (tmp_path / "etcd").mkdir()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def libvirtd() -> Iterator[None]:
    with libvirt_daemons():
        yield


@pytest.fixture(scope="session")
def local_conn(libvirtd: None) -> Iterator[Any]:
    """A direct connection for the tests' own setup and assertions (not the code under test)."""
    conn = libvirt.open(LOCAL_URI)
    sweep_leftovers(conn)
    yield conn
    conn.close()


def sweep_leftovers(conn: Any) -> None:
    """Undefine inactive pf-it-* pools and networks a killed session left behind.

    Active ones may belong to a session running right now and stay.
    """
    for pool_handle in conn.listAllStoragePools(libvirt.VIR_CONNECT_LIST_STORAGE_POOLS_INACTIVE):
        if pool_handle.name().startswith("pf-it-"):
            remove_pool(pool_handle)
    for net in conn.listAllNetworks(libvirt.VIR_CONNECT_LIST_NETWORKS_INACTIVE):
        if net.name().startswith("pf-it-"):
            with contextlib.suppress(libvirt.libvirtError):
                net.undefine()


@pytest.fixture(scope="session")
def ssh_keys(tmp_path_factory: pytest.TempPathFactory) -> SshKeys:
    return make_keys(tmp_path_factory.mktemp("ssh"))


@pytest.fixture(scope="session")
def sshd(ssh_keys: SshKeys, libvirtd: None) -> Iterator[Sshd]:
    server = Sshd(ssh_keys, name="main")
    server.start()
    server.keyscan(ssh_keys.known_hosts)
    yield server
    server.stop()


@pytest.fixture
def own_sshd(tmp_path: Path) -> Iterator[Callable[..., Sshd]]:
    """Extra sshd instances a test may restart or reconfigure without touching the shared one."""
    started: list[Sshd] = []

    def start(*, streamlocal: bool = True, keys: SshKeys | None = None) -> Sshd:
        server = Sshd(
            keys or make_keys(tmp_path / f"keys{len(started)}"),
            name=f"own{len(started)}",
            streamlocal=streamlocal,
        )
        server.start()
        server.keyscan(server.keys.known_hosts)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def pool(local_conn: Any) -> Iterator[tuple[str, Path]]:
    name = f"pf-it-{secrets.token_hex(3)}"
    # Outside /tmp/pytest-of-root (0700): QEMU runs as libvirt-qemu and must reach the files.
    directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir="/var/tmp"))
    directory.chmod(0o755)
    pool_xml = ET.Element("pool", {"type": "dir"})
    ET.SubElement(pool_xml, "name").text = name
    ET.SubElement(ET.SubElement(pool_xml, "target"), "path").text = str(directory)
    handle = local_conn.storagePoolDefineXML(ET.tostring(pool_xml, encoding="unicode"), 0)
    try:
        handle.create(0)
        yield name, directory
    finally:
        remove_pool(handle)


def remove_pool(handle: Any) -> None:
    """Stop and undefine a test pool and remove its directory, whatever state it is in."""
    path = ET.fromstring(handle.XMLDesc(0)).findtext("target/path") or ""
    with contextlib.suppress(libvirt.libvirtError):
        handle.destroy()
    with contextlib.suppress(libvirt.libvirtError):
        handle.undefine()
    if path.startswith("/var/tmp/pf-it-"):
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def network(local_conn: Any) -> Iterator[str]:
    """An isolated network (no forward, no IP): just a bridge of its own."""
    suffix = secrets.token_hex(3)
    name = f"pf-it-{suffix}"
    net_xml = ET.Element("network")
    ET.SubElement(net_xml, "name").text = name
    ET.SubElement(net_xml, "bridge", {"name": f"pfit{suffix}", "stp": "on", "delay": "0"})
    handle = local_conn.networkDefineXML(ET.tostring(net_xml, encoding="unicode"))
    try:
        handle.create()
        yield name
    finally:
        with contextlib.suppress(libvirt.libvirtError):
            handle.destroy()
        with contextlib.suppress(libvirt.libvirtError):
            handle.undefine()


@pytest.fixture(scope="session")
def host(sshd: Sshd, pool: tuple[str, Path], network: str) -> Host:
    return Host(
        name="it1",
        address="127.0.0.1",
        port=sshd.port,
        zone="z1",
        network=HostNetwork("network", network),
        pool=pool[0],
        domain_type=DomainType.QEMU,
        cpu_mode="none",
    )


@pytest.fixture(scope="session")
def settings(ssh_keys: SshKeys) -> SshSettings:
    return SshSettings(
        key_file=ssh_keys.client_key,
        known_hosts_file=ssh_keys.known_hosts,
        connect_timeout=10.0,
        call_timeout=60.0,
        keepalive_interval=5.0,
    )


@pytest.fixture
def make_host(host: Host, settings: SshSettings) -> Iterator[Callable[..., LibvirtHost]]:
    """LibvirtHost factory; every adapter it made is closed after the test."""
    made: list[LibvirtHost] = []

    def make(
        target: Host | None = None, ssh: SshSettings | None = None, **kwargs: Any
    ) -> LibvirtHost:
        adapter = LibvirtHost(target or host, ssh or settings, **kwargs)
        made.append(adapter)
        return adapter

    yield make
    for adapter in made:
        adapter.close()


@pytest.fixture
def adapter(make_host: Callable[..., LibvirtHost]) -> LibvirtHost:
    return make_host()


@pytest.fixture
def blank_image(tmp_path: Path) -> BlankImage:
    """A tiny blank qcow2 (guests need not boot) under a key of its own."""
    path = tmp_path / "blank.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(path), "64M"], check=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    image = Image(
        key=f"blank-{secrets.token_hex(3)}",
        url=path.as_uri(),
        sha256=digest,
        format=ImageFormat.QCOW2,
        firmware=Firmware.UEFI,
    )
    return BlankImage(image, path, digest)


@pytest.fixture
def make_spec(host: Host) -> Callable[..., VmSpec]:
    def make(
        proxy: str,
        image: Image,
        *,
        user_data: str = "#cloud-config\n{}\n",
        target: Host | None = None,
    ) -> VmSpec:
        digest = hashlib.sha256(f"{proxy}/{image.sha256}/{user_data}".encode()).hexdigest()
        domain = f"pf-{FLEET}-{proxy}-{digest[:8]}"
        return VmSpec(
            domain=domain,
            proxy=proxy,
            host=target or host,
            image=image,
            machine_type=MachineType(key="tiny", vcpus=1, memory_mib=256, disk_gib=1),
            cloud_init=CloudInit(user_data=user_data),
            install_guest_agent=True,
            owner=Owner(
                fleet=FLEET,
                proxy=proxy,
                digest=digest,
                image_key=image.key,
                image_sha256=image.sha256 or "",
                revision="0" * 40,
                created="2026-11-30T00:00:00+00:00",
            ),
        )

    return make


@pytest.fixture
def cleanup_domains(local_conn: Any, host: Host) -> Iterator[list[str]]:
    """Names listed here are destroyed and undefined after the test whatever happened, and
    their overlay and seed volumes removed from the test pool (left behind, they would be
    the next test's leftovers of an interrupted create)."""
    names: list[str] = []
    yield names
    for name in names:
        try:
            dom = local_conn.lookupByName(name)
        except libvirt.libvirtError:
            continue
        if dom.isActive():
            dom.destroy()
        dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM)
    test_pool = local_conn.storagePoolLookupByName(host.pool)
    for name in names:
        for volume in (f"{name}.qcow2", f"{name}-seed.iso"):
            with contextlib.suppress(libvirt.libvirtError):
                test_pool.storageVolLookupByName(volume).delete(0)


@pytest.fixture
def all_logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Capture every logger at every level, TRACE (5) included."""
    caplog.set_level(1)
    logging.getLogger().setLevel(1)
    return caplog
