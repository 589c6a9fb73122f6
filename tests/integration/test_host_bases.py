"""Bases named by content in a real pool: a pool laid out by key taken over, and the removal
of a base that nobody uses, checked against every domain's backing chain right before."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hostservices import BlankImage
from test_engine_cleanup import disk_domain_xml
from test_host_images import backing_of, volumes

from reconciler.adapters.libvirthost import LibvirtHost
from reconciler.core.domainxml import overlay_volume_xml
from reconciler.errors import PermanentError
from reconciler.model.vm import VmSpec, base_marker_name, base_volume_name


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

