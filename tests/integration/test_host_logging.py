"""Tracing through a real libvirtd: one line per call, XML at TRACE, never cloud-init content."""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pycdlib
import pytest
from hostservices import BlankImage

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.adapters.hypervisor.transport.libvirtrpc import TRACE
from reconciler.errors import NotFoundError
from reconciler.model import CloudInit
from reconciler.model.vm import VmSpec

# A pump or watchdog thread dying with an exception is a bug, not noise.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

CANARY = "CANARY-7f3a9c-never-log-me"


def user_data_on_the_host(seed: Path) -> bytes:
    iso = pycdlib.PyCdlib()
    iso.open(str(seed))
    out = io.BytesIO()
    try:
        iso.get_file_from_iso_fp(out, rr_path="/user-data")
    finally:
        iso.close()
    return out.getvalue()


def test_cloud_init_content_never_appears_in_any_log_line_at_debug_or_trace(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    pool: tuple[str, Path],
    cleanup_domains: list[str],
    all_logs: pytest.LogCaptureFixture,
) -> None:
    user_data = f"#cloud-config\nwrite_files:\n- path: /etc/{CANARY}\n  content: {CANARY}\n"
    spec = make_spec("canary", blank_image.image, user_data=user_data)
    spec = replace(
        spec,
        cloud_init=CloudInit(
            user_data=user_data, vendor_data=f"#!/bin/sh\necho {CANARY}\n", network_config=None
        ),
    )
    cleanup_domains.append(spec.domain)

    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    adapter.create(spec)
    adapter.observe()
    adapter.addresses(spec.domain)
    seed_bytes = user_data_on_the_host(pool[1] / spec.seed_name)
    adapter.delete(spec.domain)
    with pytest.raises(NotFoundError):
        adapter.start(spec.domain)

    assert seed_bytes == user_data.encode(), "user-data reaches the host byte for byte"
    lines = [r.getMessage() for r in all_logs.records]
    assert not [line for line in lines if CANARY in line]
    assert not [r for r in all_logs.records if CANARY in repr(r.args)]
    debug = [r.getMessage() for r in all_logs.records if r.name == "reconciler.libvirt"]
    create_lines = [m for m in debug if m.startswith("rpc=virDomainCreate ")]
    assert create_lines and "duration_ms=" in create_lines[0]
    assert f"domain={spec.domain}" in create_lines[0]
    assert any(
        "rpc=virDomainLookupByName" in m and "libvirt_error=VIR_ERR_NO_DOMAIN" in m for m in debug
    )
    traced = [r.getMessage() for r in all_logs.records if r.levelno == TRACE]
    assert any("<domain" in m and "proxyfleet" in m for m in traced), "TRACE carries domain XML"
    assert any("<volume" in m for m in traced), "TRACE carries volume XML"
