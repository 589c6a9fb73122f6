"""The KVM probe of ``hosts check`` against the fixture host's real libvirtd and QEMU."""

from __future__ import annotations

import functools
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import libvirt
import pytest
from hostservices import SshKeys
from test_host_cli import access, fleet_repo

from reconciler.adapters.hypervisor.hostcheck import check as hostcheck
from reconciler.adapters.hypervisor.hostcheck.kvmprobe import probe_kvm
from reconciler.adapters.hypervisor.images.baseimage import BaseImages
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.cli import main
from reconciler.core.render.kvmguest import PROBE_DOMAIN, PROBE_VOLUME
from reconciler.model import Host


def leftovers(conn: Any, host: Host) -> list[str]:
    pool = conn.storagePoolLookupByName(host.pool)
    pool.refresh(0)
    found = [f"volume {v}" for v in pool.listVolumes() if v == PROBE_VOLUME]
    names = [d.name() for d in conn.listAllDomains(0)]
    return found + [f"domain {n}" for n in names if n == PROBE_DOMAIN]


def test_the_probe_guest_reaches_long_mode_under_tcg_and_leaves_nothing_behind(
    adapter: LibvirtHost, host: Host, local_conn: Any
) -> None:
    # The same guest, domain and watch as the KVM probe, under TCG: it must get through, so
    # a "not usable" from the probe is KVM's doing, not the guest's.
    verdict = probe_kvm(adapter.session, BaseImages(adapter.session), domain_type="qemu")

    assert verdict.usable, verdict.detail
    assert "a BIOS guest booted under qemu to 64-bit long mode in" in verdict.detail
    assert leftovers(local_conn, host) == []


def test_hosts_check_says_whether_kvm_is_usable_and_why_not(
    host: Host,
    ssh_keys: SshKeys,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    local_conn: Any,
) -> None:
    repo = fleet_repo(tmp_path / "repo", host)
    args = ["hosts", "check", "--repo", str(repo), *access(ssh_keys), "--host", host.name]

    code = main([*args, "--json"])
    out, err = capsys.readouterr()
    report = json.loads(out)[0]
    kvm = next(item for item in report["items"] if item["name"] == "kvm")

    # Progress per host on stderr, saying what it waits for; stdout stays the JSON.
    lines = err.splitlines()
    assert lines[0].startswith(f"{host.name}: connecting over SSH to {host.address}:"), err
    assert f"{host.name}: booting the KVM probe guest, up to 45 s ..." in lines, err
    assert lines[-1].startswith(f"{host.name}: ready after "), err

    print(f"kvm: {kvm['detail']}")
    # The fleet's host runs domainType: qemu, so KVM's answer informs and fails nothing.
    assert code == 0 and kvm["ok"], kvm
    assert report["kvm_usable"] is not None
    if not os.path.exists("/dev/kvm"):
        assert kvm["detail"].startswith("not usable: libvirt offers no kvm domain type")
    elif report["kvm_usable"]:
        assert kvm["detail"].startswith("usable: a BIOS guest booted under kvm to 64-bit long")
    else:
        assert kvm["detail"].startswith("not usable: ")
        assert "this host runs domainType: qemu (TCG), which does not need it" in kvm["detail"]
    assert leftovers(local_conn, host) == []


def test_a_probe_that_cannot_decide_does_not_fail_a_tcg_host(
    host: Host,
    ssh_keys: SshKeys,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    local_conn: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As in issue 43: libvirt gives no answer to the probe's create within its deadline
    # (here a deadline too short for any create, on the real libvirtd through the real sshd).
    monkeypatch.setattr(hostcheck, "probe_kvm", functools.partial(probe_kvm, timeout=0.001))
    repo = fleet_repo(tmp_path / "repo", host)
    args = ["hosts", "check", "--repo", str(repo), *access(ssh_keys), "--host", host.name]

    code = main(args)
    out = capsys.readouterr().out

    kvm = next(line for line in out.splitlines() if line.split()[1:2] == ["kvm"])
    assert code == 0, out
    assert kvm.split()[2] == "ok", kvm
    assert "not decided: KVM probe failed: " in kvm and "no answer within 0 s" in kvm, kvm
    assert "this host runs domainType: qemu (TCG), which does not need it" in kvm
    assert "1 of 1 hosts ready" in out
    assert leftovers(local_conn, host) == []


def test_a_foreign_domain_of_the_probes_name_is_left_alone_and_stops_the_probe(
    adapter: LibvirtHost, host: Host, local_conn: Any
) -> None:
    domain = ET.Element("domain", {"type": "qemu"})
    ET.SubElement(domain, "name").text = PROBE_DOMAIN
    ET.SubElement(domain, "memory", {"unit": "MiB"}).text = "16"
    os_element = ET.SubElement(domain, "os")
    ET.SubElement(os_element, "type", {"arch": "x86_64"}).text = "hvm"
    foreign = local_conn.defineXML(ET.tostring(domain, encoding="unicode"))
    try:
        verdict = probe_kvm(adapter.session, BaseImages(adapter.session), domain_type="qemu")
        still = local_conn.lookupByName(PROBE_DOMAIN).UUIDString()
    finally:
        foreign.undefine()

    assert not verdict.usable
    assert verdict.detail == (
        f"not probed: a domain named {PROBE_DOMAIN} exists and is not a probe's"
    )
    assert still == foreign.UUIDString()
    with pytest.raises(libvirt.libvirtError):
        local_conn.storagePoolLookupByName(host.pool).storageVolLookupByName(PROBE_VOLUME)
