"""A base's marker read once for many creates, and forgotten the moment it could be wrong."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hostservices import BlankImage
from test_host_images import rpcs, volumes

from reconciler.adapters.hypervisor.images import baseimage
from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.errors import PermanentError
from reconciler.model import DomainState
from reconciler.model.vm import VmSpec, base_marker_name, base_volume_name

# A pump or watchdog thread dying with an exception is a bug, not noise.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

MARKER_READ = "virStorageVolDownload"


@pytest.fixture
def two_specs(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
) -> tuple[VmSpec, VmSpec]:
    """Two specs on the blank base, its image ensured, neither created yet."""
    first, second = make_spec("vb-a", blank_image.image), make_spec("vb-b", blank_image.image)
    cleanup_domains.extend([first.domain, second.domain])
    adapter.ensure_image(blank_image.image, blank_image.path)
    return first, second


@pytest.fixture
def created_one(adapter: LibvirtHost, two_specs: tuple[VmSpec, VmSpec]) -> tuple[VmSpec, VmSpec]:
    """``two_specs`` with the first created (its marker read), the second not."""
    adapter.create(two_specs[0])
    return two_specs


def test_the_second_create_on_a_base_reads_neither_its_marker_nor_the_new_domains_state(
    adapter: LibvirtHost,
    two_specs: tuple[VmSpec, VmSpec],
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = two_specs
    caplog.set_level(logging.DEBUG, logger="reconciler.libvirt")

    adapter.create(first)
    first_calls = rpcs(caplog)
    caplog.clear()
    adapter.create(second)
    second_calls = rpcs(caplog)

    assert first_calls.count(MARKER_READ) == 1
    assert MARKER_READ not in second_calls
    assert "virDomainGetState" not in first_calls + second_calls
    assert second_calls.count("virDomainCreate") == 1
    assert len(second_calls) <= len(first_calls) - 3
    # The new volumes are created outright and their paths are the objects' keys.
    assert "virStorageVolLookupByName" not in second_calls
    assert "virStorageVolGetPath" not in second_calls
    states = {d.name: d.state for d in adapter.observe().domains}
    assert states[first.domain] is states[second.domain] is DomainState.RUNNING
    adapter.delete(first.domain)
    adapter.delete(second.domain)


def test_a_marker_removed_on_the_host_is_seen_by_the_first_create_after_the_window(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    created_one: tuple[VmSpec, VmSpec],
    pool: tuple[str, Path],
    local_conn: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    first, second = created_one
    monkeypatch.setattr(baseimage, "VERIFIED_FOR", 0.0)
    marker = base_marker_name(base_volume_name(blank_image.image))
    volumes(local_conn, pool[0])[marker].delete(0)

    with pytest.raises(PermanentError, match="not uploaded and verified"):
        adapter.create(second)

    assert second.overlay_name not in volumes(local_conn, pool[0])
    adapter.delete(first.domain)


def test_a_base_removed_through_the_adapter_is_forgotten_at_once(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    created_one: tuple[VmSpec, VmSpec],
    pool: tuple[str, Path],
    local_conn: Any,
) -> None:
    first, second = created_one
    base = base_volume_name(blank_image.image)
    adapter.delete(first.domain)

    assert adapter.remove_unused_base(base) == (base_marker_name(base), base)
    with pytest.raises(PermanentError, match="not uploaded and verified"):
        adapter.create(second)

    assert second.overlay_name not in volumes(local_conn, pool[0])
