"""Reconcile cycles through sshd against a real libvirtd: create, quiet, replace, delete.

The guests boot a blank disk, so they never get an IP: that is the point of
the replace case (a replacement that never gets healthy halts, the old VM in place).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import libvirt
import pytest
from hostservices import BlankImage

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.cli import compose
from reconciler.core.render.metadata import owner_from_domain_xml
from reconciler.engine.reconcile import Engine
from reconciler.engine.runtime import Runtime
from reconciler.model import ActionKind, Host, Image
from reconciler.model.report import ActionResult, RunResult
from reconciler.model.settings import ApplySettings, SshSettings

MUTATING_RPCS = (
    "virDomainCreate",
    "virDomainDefine",
    "virDomainDestroy",
    "virDomainUndefine",
    "virDomainSetMetadata",
    "virStorageVolCreate",
    "virStorageVolUpload",
    "virStorageVolDelete",
    "virStorageVolWipe",
)


class LocalImage:
    """The image cache, served from the blank test image (no network in tests)."""

    def __init__(self, blank: BlankImage) -> None:
        self.blank = blank

    def fetch(self, image: Image) -> BlankImage:
        return self.blank

    def size(self, image: Image) -> int | None:
        return self.blank.path.stat().st_size


class NoProxy:
    def probe(self, ip: str, health: Any) -> Any:
        raise AssertionError("blank guests never get an IP, so nothing is probed")


def fleet_yaml(host: Host, blank: BlankImage) -> str:
    return f"""\
apiVersion: proxyfleet/v1
kind: Fleet
metadata:
  name: eng
spec:
  images:
    blank:
      url: https://images.invalid/blank.qcow2
      sha256: {blank.sha256}
  machineTypes:
    tiny: {{vcpus: 1, memoryMiB: 128, diskGiB: 1}}
  hosts:
    - name: {host.name}
      address: {host.address}
      port: {host.port}
      zone: {host.zone}
      pool: {host.pool}
      network: {{network: {host.network.name}}}
      domainType: qemu
      cpuMode: none
  policy: {{prune: true}}
"""


def proxy_yaml(name: str, hostname: str) -> str:
    return f"""\
---
apiVersion: proxyfleet/v1
kind: Proxy
metadata:
  name: {name}
spec:
  placement: {{zone: z1, image: blank, machineType: tiny}}
  installGuestAgent: false
  cloudInit:
    userData: |
      #cloud-config
      hostname: {hostname}
"""


@pytest.fixture
def engine(
    settings: SshSettings, blank_image: BlankImage, local_conn: Any, host: Host
) -> Iterator[tuple[Engine, list[str]]]:
    """An engine over the session's test pool, swept of the bases earlier tests left: a base
    no image of the test's fleet.yaml names is planned for removal, which would add an
    outcome to every cycle a test checks."""
    pool = local_conn.storagePoolLookupByName(host.pool)
    pool.refresh(0)
    for volume in pool.listAllVolumes(0):
        if volume.name().startswith("base-"):
            with contextlib.suppress(libvirt.libvirtError):
                volume.delete(0)
    rpcs: list[str] = []
    lock = threading.Lock()

    def observer(rpc: str, host: str, seconds: float, ok: bool) -> None:
        with lock:
            rpcs.append(rpc)

    def factory(host: Host) -> LibvirtHost:
        return LibvirtHost(host, settings, observer=observer)

    built = (
        compose.engine(
            factory,
            images=LocalImage(blank_image),
            prober=NoProxy(),
            settings=ApplySettings(replace_timeout=6, ip_wait_timeout=2, poll_interval=2),
            runtime=Runtime(),
        ),
        rpcs,
    )
    yield built
    built[0].close()


def owned(local_conn: Any) -> dict[str, bool]:
    return {
        d.name(): bool(d.isActive())
        for d in local_conn.listAllDomains(0)
        if d.name().startswith("pf-eng-")
    }


def test_cycles_create_then_idle_then_keep_the_old_vm_when_the_replacement_is_unhealthy_then_delete(
    engine: tuple[Engine, list[str]],
    host: Host,
    blank_image: BlankImage,
    local_conn: Any,
    tmp_path: Path,
    cleanup_domains: list[str],
) -> None:
    eng, rpcs = engine
    (tmp_path / "fleet.yaml").write_text(fleet_yaml(host, blank_image))
    manifests = tmp_path / "proxies.yaml"
    manifests.write_text(proxy_yaml("web-1", "one"))

    first = eng.reconcile_once(tmp_path, revision="r1")
    cleanup_domains.extend(o.action.domain or "" for o in first.outcomes)
    assert [o.result for o in first.outcomes] == [ActionResult.SUCCEEDED]
    (created,) = [o.action.domain for o in first.outcomes]
    assert owned(local_conn) == {created: True}
    (web1,) = first.proxies
    assert (web1.state, web1.ip) == ("running", "")

    rpcs.clear()
    second = eng.reconcile_once(tmp_path, revision="r1")
    assert second.outcomes == ()
    assert [r for r in rpcs if r.startswith(MUTATING_RPCS)] == []
    print(f"idle cycle RPCs: {sorted(set(rpcs))}")

    manifests.write_text(proxy_yaml("web-1", "changed"))
    third = eng.reconcile_once(tmp_path, revision="r2")
    (replace,) = third.outcomes
    cleanup_domains.append(replace.action.domain or "")
    assert replace.result is ActionResult.SUCCEEDED  # created; the run does not wait for it
    assert owned(local_conn) == {created: True, replace.action.domain: True}
    assert third.result is RunResult.SUCCESS and third.settling == ("web-1",)

    time.sleep(7)  # past replace_timeout (6 s): the next plan reads the deadline as passed
    fourth = eng.reconcile_once(tmp_path, revision="r2")
    assert fourth.outcomes == ()
    assert [h.proxy for h in fourth.halts] == ["web-1"]
    assert owned(local_conn)[created] is True

    manifests.write_text("")
    (tmp_path / "other.yaml").write_text(proxy_yaml("web-2", "two"))
    fifth = eng.reconcile_once(tmp_path, revision="r3")
    cleanup_domains.extend(o.action.domain or "" for o in fifth.outcomes)
    kinds = sorted((o.action.kind.value, o.result.value) for o in fifth.outcomes)
    assert ("create", "succeeded") in kinds
    assert all(r == "succeeded" for _, r in kinds), fifth.outcomes
    left = owned(local_conn)
    assert created not in left
    assert [d for d in left if "-web-1-" in d] == []


def recorded_protect(local_conn: Any, domain: str) -> tuple[bool, str] | None:
    """(protect, revision) as the domain's live and persistent definitions both record them."""
    dom = local_conn.lookupByName(domain)
    owners = {owner_from_domain_xml(dom.XMLDesc(f)) for f in (0, libvirt.VIR_DOMAIN_XML_INACTIVE)}
    assert len(owners) == 1, f"live and persistent metadata differ: {owners}"
    (owner,) = owners
    return (owner.protect, owner.revision) if owner is not None else None


def test_protect_toggled_on_an_existing_vm_is_recorded_once_and_outlives_its_manifest(
    engine: tuple[Engine, list[str]],
    host: Host,
    blank_image: BlankImage,
    local_conn: Any,
    tmp_path: Path,
    cleanup_domains: list[str],
) -> None:
    eng, rpcs = engine
    fleet = fleet_yaml(host, blank_image).replace(
        "{prune: true}", "{prune: true, allowEmpty: true}"
    )
    (tmp_path / "fleet.yaml").write_text(fleet)
    manifests = tmp_path / "proxies.yaml"
    manifests.write_text(proxy_yaml("web-3", "three"))
    first = eng.reconcile_once(tmp_path, revision="r1")
    cleanup_domains.extend(o.action.domain or "" for o in first.outcomes)
    (created,) = [o.action.domain or "" for o in first.outcomes]
    assert recorded_protect(local_conn, created) == (False, "r1")

    manifests.write_text(proxy_yaml("web-3", "three") + "  lifecycle: {protect: true}\n")
    rpcs.clear()
    relabelled = eng.reconcile_once(tmp_path, revision="r2")

    assert [(o.action.kind.value, o.result.value) for o in relabelled.outcomes] == [
        ("relabel", "succeeded")
    ]
    assert [r for r in rpcs if r.startswith(MUTATING_RPCS)] == ["virDomainSetMetadata"]
    assert recorded_protect(local_conn, created) == (True, "r1")
    rpcs.clear()
    assert eng.reconcile_once(tmp_path, revision="r2").outcomes == ()
    assert [r for r in rpcs if r.startswith(MUTATING_RPCS)] == []

    manifests.write_text("")
    rpcs.clear()
    gone = eng.reconcile_once(tmp_path, revision="r3")

    assert gone.outcomes == ()
    assert [r for r in rpcs if r.startswith(MUTATING_RPCS)] == []
    assert owned(local_conn) == {created: True}
    assert gone.plan is not None
    (blocked,) = gone.plan.actions
    assert (blocked.blocks, blocked.reason) == (ActionKind.DELETE, "protected (lifecycle.protect)")

    manifests.write_text(proxy_yaml("web-3", "three") + "  lifecycle: {protect: false}\n")
    unprotected = eng.reconcile_once(tmp_path, revision="r4")
    assert [o.action.kind.value for o in unprotected.outcomes] == ["relabel"]
    manifests.write_text("")
    # Dropping the only (now unprotected) proxy is a 100% shrink: Stalled until acknowledged.
    refused = eng.reconcile_once(tmp_path, revision="r5")
    assert refused.result is RunResult.STALLED and refused.outcomes == ()
    assert list(owned(local_conn)) == [created]
    (tmp_path / "fleet.yaml").write_text(
        fleet.replace("allowEmpty: true}", "allowEmpty: true, acknowledgeShrinkTo: 0}")
    )
    pruned = eng.reconcile_once(tmp_path, revision="r6")
    assert [(o.action.kind.value, o.result.value) for o in pruned.outcomes] == [
        ("delete", "succeeded")
    ]
    assert owned(local_conn) == {}
