"""Bases named by content in a real pool: a pool laid out by key taken over, and the removal
of a base that nobody uses, checked against every domain's backing chain right before."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hostservices import BlankImage
from test_engine_cleanup import disk_domain_xml
from test_engine_libvirt import engine, fleet_yaml, proxy_yaml
from test_host_images import backing_of, volumes

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.core.render.domainxml import overlay_volume_xml
from reconciler.engine.reconcile import Engine
from reconciler.errors import PermanentError
from reconciler.model import ActionKind, Host
from reconciler.model.report import ActionResult
from reconciler.model.vm import VmSpec, base_marker_name, base_volume_name

__all__ = ["engine"]  # the fixture, shared with test_engine_libvirt

SHARED_WAIT = 300.0
"""Seconds the removal may wait for other sessions' VMs to leave the shared test libvirtd."""


def test_a_pool_laid_out_by_key_is_taken_over_and_its_base_goes_once_its_shut_off_vm_does(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    pool: tuple[str, Path],
    local_conn: Any,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
) -> None:
    """An image without a pinned sha256 lays its base out as every image did before content
    names: base-<key>.qcow2 and its marker, which is what a takeover finds."""
    legacy_image = replace(blank_image.image, sha256=None)
    legacy = base_volume_name(legacy_image)
    assert legacy == f"base-{blank_image.image.key}.qcow2"
    adapter.ensure_image(legacy_image, blank_image.path)
    old_vm = make_spec("old", legacy_image)
    cleanup_domains.append(old_vm.domain)
    adapter.create(old_vm)
    local_conn.lookupByName(old_vm.domain).destroy()  # shut off: no backing chain in its XML

    adapter.ensure_image(blank_image.image, blank_image.path)
    new_vm = make_spec("new", blank_image.image)
    cleanup_domains.append(new_vm.domain)
    adapter.create(new_vm)

    content = base_volume_name(blank_image.image)
    names = volumes(local_conn, pool[0])
    assert {legacy, base_marker_name(legacy), content, base_marker_name(content)} <= set(names)
    assert backing_of(names[old_vm.overlay_name]) == str(pool[1] / legacy)
    assert backing_of(names[new_vm.overlay_name]) == str(pool[1] / content)

    assert adapter.remove_unused_base(legacy) == ()
    assert {legacy, base_marker_name(legacy)} <= set(volumes(local_conn, pool[0]))

    adapter.delete(old_vm.domain)

    assert adapter.remove_unused_base(legacy) == (base_marker_name(legacy), legacy)
    assert adapter.remove_unused_base(content) == ()
    left = set(volumes(local_conn, pool[0]))
    assert not {legacy, base_marker_name(legacy)} & left
    assert {content, base_marker_name(content), new_vm.overlay_name} <= left
    assert local_conn.lookupByName(new_vm.domain).isActive()


def test_a_base_a_foreign_domain_reaches_through_a_backing_chain_is_kept_until_nothing_uses_it(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    pool: tuple[str, Path],
    local_conn: Any,
    cleanup_domains: list[str],
) -> None:
    adapter.ensure_image(blank_image.image, blank_image.path)
    base = base_volume_name(blank_image.image)
    handle = local_conn.storagePoolLookupByName(pool[0])
    tag = secrets.token_hex(3)
    first, second = f"rescue-{tag}-1.qcow2", f"rescue-{tag}-2.qcow2"
    for name, backing in ((first, base), (second, first)):
        path = str(pool[1] / backing)
        handle.createXML(
            overlay_volume_xml(name, capacity_gib=1, base_path=path, base_format="qcow2"), 0
        )
    rescue = f"rescue-{tag}"
    cleanup_domains.append(rescue)
    local_conn.defineXML(disk_domain_xml(rescue, str(pool[1] / second)))

    with pytest.raises(PermanentError, match="not a base volume name"):
        adapter.remove_unused_base(second)
    assert adapter.remove_unused_base(base) == ()  # the domain, two links down

    local_conn.lookupByName(rescue).undefine()
    volumes(local_conn, pool[0])[second].delete(0)

    assert adapter.remove_unused_base(base) == ()  # the first overlay still backs onto it
    assert {base, base_marker_name(base)} <= set(volumes(local_conn, pool[0]))

    volumes(local_conn, pool[0])[first].delete(0)

    assert adapter.remove_unused_base(base) == (base_marker_name(base), base)
    assert not {base, base_marker_name(base)} & set(volumes(local_conn, pool[0]))
    assert adapter.remove_unused_base(base) == ()


def test_a_cycle_after_its_last_vm_went_the_base_of_a_key_gone_from_fleet_yaml_is_removed(
    engine: tuple[Engine, list[str]],
    host: Host,
    blank_image: BlankImage,
    local_conn: Any,
    tmp_path: Path,
    cleanup_domains: list[str],
) -> None:
    """Plan, executor and host together: web-1 on key blank, web-2 on key spare (same file).
    The engine fixture swept the pool of other tests' bases.

    The test libvirtd is the machine's, shared with other sessions' tests: the fleet gets an
    id of its own (their ``eng`` VMs would be ours otherwise), and while their VMs are on
    the host it counts as shared with another fleet and no base is removed, so the last
    step runs cycles until they are gone (bounded)."""
    eng, rpcs = engine
    fleet = f"bases{secrets.token_hex(2)}"
    both = fleet_yaml(host, blank_image).replace("  name: eng\n", f"  name: {fleet}\n")
    assert fleet in both
    image = f"{{url: https://images.invalid/s.qcow2, sha256: {blank_image.sha256}}}"
    spare = both.replace("  images:\n", f"  images:\n    spare: {image}\n")
    (tmp_path / "fleet.yaml").write_text(spare)
    (tmp_path / "web-1.yaml").write_text(proxy_yaml("web-1", "one"))
    (tmp_path / "web-2.yaml").write_text(
        proxy_yaml("web-2", "two").replace("image: blank", "image: spare")
    )
    first = eng.reconcile_once(tmp_path, revision="r1")
    cleanup_domains.extend(o.action.domain or "" for o in first.outcomes)
    assert [(o.action.kind, o.result) for o in first.outcomes] == [
        (ActionKind.CREATE, ActionResult.SUCCEEDED)
    ] * 2, first.outcomes
    sha = blank_image.sha256[:12]
    old, kept = f"base-blank-{sha}.qcow2", f"base-spare-{sha}.qcow2"
    assert {old, kept} <= set(volumes(local_conn, host.pool))
    blank = "    blank:\n      url: https://images.invalid/blank.qcow2\n"
    without = spare.replace(f"{blank}      sha256: {blank_image.sha256}\n", "")
    assert without != spare
    (tmp_path / "fleet.yaml").write_text(without)
    (tmp_path / "web-1.yaml").unlink()

    second = eng.reconcile_once(tmp_path, revision="r2")  # web-1 goes; its base is recorded

    assert [(o.action.kind, o.result) for o in second.outcomes] == [
        (ActionKind.DELETE, ActionResult.SUCCEEDED)
    ]
    assert old in volumes(local_conn, host.pool)

    deadline = time.monotonic() + SHARED_WAIT
    while not (third := eng.reconcile_once(tmp_path, revision="r2")).outcomes:
        assert time.monotonic() < deadline, "another fleet's VMs never left the host"
        time.sleep(5)

    assert [(o.action.kind, o.action.volumes, o.result) for o in third.outcomes] == [  # type: ignore[attr-defined]
        (ActionKind.CLEANUP, (old, base_marker_name(old)), ActionResult.SUCCEEDED)
    ]
    left = set(volumes(local_conn, host.pool))
    assert not {old, base_marker_name(old)} & left and {kept, base_marker_name(kept)} <= left
    rpcs.clear()
    assert eng.reconcile_once(tmp_path, revision="r2").outcomes == ()
    assert "virStorageVolDelete" not in rpcs
