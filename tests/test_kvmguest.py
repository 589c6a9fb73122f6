"""The KVM probe's guest and verdicts, without a hypervisor (the real runs: tests/integration)."""

from __future__ import annotations

import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import libvirt
import pytest

from reconciler.adapters.hypervisor.hostcheck.kvmprobe import _watch
from reconciler.core.render import kvmguest
from reconciler.core.render.domainxml import cpu_element
from reconciler.core.render.kvmguest import (
    BOOT_SECTOR,
    DISK_IMAGE,
    PROBE_DOMAIN,
    Stage,
    is_probe_xml,
    probe_domain_xml,
    stage_of,
)
from reconciler.errors import NotFoundError

SOURCE = Path(kvmguest.__file__).with_name("kvmguest_boot.S")


def test_the_boot_sector_is_its_assembly_source_assembled(tmp_path: Path) -> None:
    obj, out = tmp_path / "boot.o", tmp_path / "boot.bin"
    subprocess.run(["as", "--32", "-o", str(obj), str(SOURCE)], check=True)
    subprocess.run(
        ["ld", "-m", "elf_i386", "-Ttext", "0x7c00", "--oformat", "binary", "-o", str(out), obj],
        check=True,
    )

    assert out.read_bytes() == BOOT_SECTOR
    assert len(BOOT_SECTOR) == 512 and BOOT_SECTOR.endswith(b"\x55\xaa")
    assert DISK_IMAGE.startswith(BOOT_SECTOR) and len(DISK_IMAGE) >= 16 * 63 * 512


@pytest.mark.parametrize(
    ("marker", "stage"),
    [
        (b"\0" * 8, Stage.FIRMWARE),
        (b"PVM1\0\0\0\0", Stage.REAL_MODE),
        (b"PVM2\0\0\0\0", Stage.PROTECTED_MODE),
        (b"PVM3\0\0\0\0", Stage.IRET),
        (b"PVM4\0\0\0\0", Stage.IRET),
        (b"PVM4OKOK", Stage.LONG_MODE),
        (b"junkjunk", Stage.FIRMWARE),
    ],
)
def test_the_marker_tells_how_far_the_guest_got(marker: bytes, stage: Stage) -> None:
    assert stage_of(marker) is stage


def test_the_probe_domain_is_kvm_bios_on_q35_with_a_read_only_disk_and_no_nic() -> None:
    xml = probe_domain_xml(disk_path="/pool/proxyfleet-kvm-probe.img", cpu=cpu_element("none"))
    root = ET.fromstring(xml)

    assert root.get("type") == "kvm"
    assert root.findtext("name") == PROBE_DOMAIN
    assert root.find("os/type").get("machine") == "q35"  # type: ignore[union-attr]
    assert root.find("os").get("firmware") is None  # type: ignore[union-attr]
    assert root.find("cpu") is None
    assert root.find("devices/interface") is None
    disk = root.find("devices/disk")
    assert disk is not None and disk.find("readonly") is not None
    assert disk.find("source").get("file") == "/pool/proxyfleet-kvm-probe.img"  # type: ignore[union-attr]
    assert {root.findtext(e) for e in ("on_poweroff", "on_reboot", "on_crash")} == {"destroy"}
    assert is_probe_xml(xml)


def test_a_host_model_cpu_is_probed_as_the_proxies_would_run() -> None:
    xml = probe_domain_xml(disk_path="/p", cpu=cpu_element("host-model"))
    assert ET.fromstring(xml).find("cpu").get("mode") == "host-model"  # type: ignore[union-attr]


def test_a_domain_of_the_probes_name_without_its_metadata_is_not_a_probe() -> None:
    foreign = f"<domain type='kvm'><name>{PROBE_DOMAIN}</name><metadata/></domain>"
    bare = (
        f"<domain type='kvm'><name>{PROBE_DOMAIN}</name>"
        "<metadata><probe>kvm</probe></metadata></domain>"
    )
    assert not is_probe_xml(foreign)
    assert is_probe_xml(bare)  # libvirt 11 returns metadata without its namespace


class StubSession:
    """Runs each call against a scripted domain; what _watch sees of libvirt."""

    def __init__(self) -> None:
        self.host = None

    def call(self, _rpc: str, fn: Callable[[Any], Any], **_ids: object) -> Any:
        return fn(None)


class ScriptedDomain:
    def __init__(self, steps: list[tuple[int, int, bytes] | None]) -> None:
        self.steps = steps
        self.now: tuple[int, int, bytes] | None = steps[0]

    def state(self, _flags: int) -> tuple[int, int]:
        self.now = self.steps.pop(0) if len(self.steps) > 1 else self.steps[0]
        if self.now is None:
            raise NotFoundError("gone", host="h")
        return self.now[0], self.now[1]

    def memoryPeek(self, _start: int, _size: int, _flags: int) -> bytes:
        assert self.now is not None
        return self.now[2]


def watch(steps: list[tuple[int, int, bytes] | None], timeout: float = 90) -> Any:
    clock = iter(range(0, 1000, 5))
    return _watch(
        StubSession(),  # type: ignore[arg-type]
        ScriptedDomain(steps),
        timeout=timeout,
        clock=lambda: float(next(clock)),
        sleep=lambda _s: None,
        domain_type="kvm",
    )


RUNNING, PAUSED = libvirt.VIR_DOMAIN_RUNNING, libvirt.VIR_DOMAIN_PAUSED


def test_a_guest_reaching_long_mode_means_kvm_is_usable() -> None:
    verdict = watch(
        [(RUNNING, 1, b"\0" * 8), (RUNNING, 1, b"PVM2\0\0\0\0"), (RUNNING, 1, b"PVM4OKOK")]
    )
    assert verdict.usable
    assert "64-bit long mode in 15.0 s" in verdict.detail


def test_a_guest_paused_by_kvm_is_not_usable_and_the_reason_names_how_far_it_got() -> None:
    verdict = watch([(RUNNING, 1, b"\0" * 8), (PAUSED, 0, b"PVM2\0\0\0\0")])
    assert not verdict.usable
    assert "paused, reason unknown" in verdict.detail
    assert "once the boot sector entered 32-bit protected mode" in verdict.detail
    assert "KVM internal error" in verdict.detail


def test_a_guest_that_vanishes_is_not_usable() -> None:
    verdict = watch([(RUNNING, 1, b"PVM1\0\0\0\0"), None])
    assert not verdict.usable
    assert "ended 10 s after start (the boot sector ran in real mode)" in verdict.detail


def test_a_guest_still_in_the_firmware_at_the_timeout_is_not_usable() -> None:
    verdict = watch([(RUNNING, 1, b"\0" * 8)], timeout=30)
    assert not verdict.usable
    assert "had not reached long mode 30 s after start (SeaBIOS had not started" in verdict.detail
