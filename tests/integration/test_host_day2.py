"""What self-healing reads from and does on a real libvirtd, over a real sshd: a VM
killed from outside is seen as shut off for a failure and started again; a VM's
vCPUs and memory as the running domain has them (a hand edit shows); a VM whose QEMU stops
answering costs no observe of its host."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libvirt
import pytest
from hostservices import BlankImage

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.model import Domain, DomainState
from reconciler.model.settings import SshSettings
from reconciler.model.vm import VmSpec

QEMU_PIDS = Path("/run/libvirt/qemu")


def observed(adapter: LibvirtHost, domain: str) -> Domain:
    return next(d for d in adapter.observe().domains if d.name == domain)


def kill_qemu(domain: str) -> None:
    pid = int((QEMU_PIDS / f"{domain}.pid").read_text().strip())
    os.kill(pid, signal.SIGKILL)


def wait_for_state(adapter: LibvirtHost, domain: str, state: DomainState) -> Domain:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        seen = observed(adapter, domain)
        if seen.state is state:
            return seen
        time.sleep(0.2)
    raise AssertionError(f"{domain} never became {state}: {observed(adapter, domain)}")


def test_a_vm_whose_qemu_is_killed_is_seen_as_crashed_and_start_brings_it_back(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("heal-1", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    running = observed(adapter, spec.domain)
    assert running.state is DomainState.RUNNING and not running.failed

    kill_qemu(spec.domain)
    down = wait_for_state(adapter, spec.domain, DomainState.SHUTOFF)

    assert down.reason == "crashed" and down.failed
    adapter.start(spec.domain)
    again = observed(adapter, spec.domain)
    assert again.state is DomainState.RUNNING and again.reason == ""


def test_a_cleanly_stopped_vm_is_shut_off_without_a_failure_reason(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("heal-2", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)

    local_conn.lookupByName(spec.domain).destroy()

    down = observed(adapter, spec.domain)
    assert down.state is DomainState.SHUTOFF and not down.failed


@pytest.mark.parametrize("edit", ["vcpus", "memory"])
def test_a_running_vm_reports_its_vcpus_and_memory_so_a_hand_edit_shows(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
    edit: str,
) -> None:
    spec = make_spec(f"edit-{edit}", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    before = observed(adapter, spec.domain)
    assert (before.vcpus, before.memory_mib) == (
        spec.machine_type.vcpus,
        spec.machine_type.memory_mib,
    )
    dom = local_conn.lookupByName(spec.domain)
    dom.destroy()
    config = 2  # VIR_DOMAIN_AFFECT_CONFIG
    if edit == "vcpus":
        dom.setVcpusFlags(2, config | 4)  # VIR_DOMAIN_VCPU_MAXIMUM
        dom.setVcpusFlags(2, config)
    else:
        dom.setMemoryFlags(192 * 1024, config | 4)  # VIR_DOMAIN_MEM_MAXIMUM
    dom.create()

    after = observed(adapter, spec.domain)

    if edit == "vcpus":
        assert (after.vcpus, after.memory_mib) == (2, spec.machine_type.memory_mib)
    else:
        assert (after.vcpus, after.memory_mib) == (spec.machine_type.vcpus, 192)


def test_a_qemu_that_stops_answering_costs_no_observe(
    adapter: LibvirtHost,
    make_host: Callable[..., LibvirtHost],
    settings: SshSettings,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
    local_conn: Any,
) -> None:
    """A QEMU that no longer answers its monitor (stopped here; in life wedged on its storage)
    must not stall an observe: it asks libvirtd only for what libvirtd holds itself (the state
    group of the bulk stats, ``virDomainGetInfo``), never the domain's QEMU. A call that asked
    the QEMU would wait past the observing adapter's 15 s call deadline, and every later one
    libvirt's 30 s for the domain's job. The host stays observable from the first observe on,
    the wedged domain listed as running with its sizes."""
    spec = make_spec("wedged", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)  # with the usual deadline: a start can be slow on a busy machine
    calls: Counter[str] = Counter()
    watcher = make_host(
        ssh=dataclasses.replace(settings, call_timeout=15.0),
        observer=lambda rpc, _host, _seconds, _ok: calls.update([rpc]),
    )
    pid = int((QEMU_PIDS / f"{spec.domain}.pid").read_text().strip())
    os.kill(pid, signal.SIGSTOP)
    try:
        for _ in range(3):
            seen = observed(watcher, spec.domain)
            assert seen.state is DomainState.RUNNING
            assert (seen.vcpus, seen.memory_mib) == (
                spec.machine_type.vcpus,
                spec.machine_type.memory_mib,
            )
        running = len(local_conn.listAllDomains(libvirt.VIR_CONNECT_LIST_DOMAINS_ACTIVE))
    finally:
        os.kill(pid, signal.SIGCONT)
    assert calls["virConnectGetAllDomainStats"] == 3
    assert calls["virDomainGetInfo"] == 3 * running, "one size read per running domain"


def test_a_vm_paused_by_a_person_says_so_and_start_resumes_a_paused_vm(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    local_conn: Any,
    cleanup_domains: list[str],
) -> None:
    spec = make_spec("pause-1", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    local_conn.lookupByName(spec.domain).suspend()

    paused = observed(adapter, spec.domain)
    assert (paused.state, paused.reason) == (DomainState.PAUSED, "user")

    adapter.start(spec.domain)
    assert observed(adapter, spec.domain).state is DomainState.RUNNING


@pytest.fixture
def full_pool(local_conn: Any) -> Any:
    """A dir pool on a 2 MiB tmpfs: any real upload fills it."""
    import secrets
    import subprocess
    import tempfile
    import xml.etree.ElementTree as ET

    name = f"pf-it-full-{secrets.token_hex(3)}"
    directory = Path(tempfile.mkdtemp(prefix=f"{name}-", dir="/var/tmp"))
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=755", name, str(directory)], check=True
    )
    pool_xml = ET.Element("pool", {"type": "dir"})
    ET.SubElement(pool_xml, "name").text = name
    ET.SubElement(ET.SubElement(pool_xml, "target"), "path").text = str(directory)
    handle = local_conn.storagePoolDefineXML(ET.tostring(pool_xml, encoding="unicode"), 0)
    try:
        handle.create(0)
        yield name
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False)
        for step in (handle.destroy, handle.undefine):
            with contextlib.suppress(libvirt.libvirtError):
                step()
        directory.rmdir()


def test_observe_sees_a_pool_filled_beside_libvirt(
    make_host: Callable[..., LibvirtHost], host: Any, full_pool: str, local_conn: Any
) -> None:
    """A guest's overlay growing, or any file written into the pool directory, is no libvirt
    call: libvirt learns of it only at a refresh, which observe therefore asks for."""
    import dataclasses
    import xml.etree.ElementTree as ET

    adapter = make_host(dataclasses.replace(host, pool=full_pool))
    before = adapter.observe().capacity
    assert before is not None and before.pool_available_bytes > 1536 * 2**10
    pool_xml = local_conn.storagePoolLookupByName(full_pool).XMLDesc(0)
    directory = Path(ET.fromstring(pool_xml).findtext("target/path") or "")
    (directory / "filler").write_bytes(b"\0" * 1536 * 2**10)

    after = adapter.observe().capacity

    assert after is not None
    assert after.pool_available_bytes <= before.pool_available_bytes - 1536 * 2**10, (
        before,
        after,
    )


def test_an_upload_into_a_full_pool_fails_at_once_naming_the_pool_and_its_free_space(
    make_host: Callable[..., LibvirtHost], host: Any, full_pool: str, tmp_path: Path
) -> None:
    import dataclasses
    import hashlib

    from reconciler.errors import PermanentError
    from reconciler.model import Firmware, Image, ImageFormat

    path = tmp_path / "big.raw"
    path.write_bytes(os.urandom(8 * 2**20))
    image = Image(
        key="big",
        url=path.as_uri(),
        sha256=hashlib.sha256(path.read_bytes()).hexdigest(),
        format=ImageFormat.RAW,
        firmware=Firmware.BIOS,
    )
    adapter = make_host(dataclasses.replace(host, pool=full_pool))

    with pytest.raises(PermanentError) as raised:
        adapter.ensure_image(image, path)

    message = str(raised.value)
    assert f"pool {full_pool} on it1 is full" in message and "GiB free" in message
    assert "No space left on device" in message
