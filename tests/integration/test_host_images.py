"""Base images in a real pool: verified upload, marker, re-upload rules, never under overlays."""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import secrets
import signal
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import pytest
from hostservices import BlankImage, Sshd, SshKeys

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.errors import PermanentError, TransientError
from reconciler.model import Image, ImageFormat
from reconciler.model.settings import LIBVIRT_TRANSPORTS, SshSettings
from reconciler.model.vm import VmSpec, base_volume_name

# A pump or watchdog thread dying with an exception is a bug, not noise.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")

MUTATING_RPCS = ("virStorageVolCreateXML", "virStorageVolUpload", "virStorageVolDelete")


@pytest.fixture(params=LIBVIRT_TRANSPORTS)
def settings(request: pytest.FixtureRequest, ssh_keys: SshKeys) -> SshSettings:
    """Every rule of the image cache holds over either ``ssh.libvirtTransport``: libvirt's
    bytes pumped by paramiko, or carried by an ``ssh -N -L`` child."""
    return SshSettings(
        key_file=ssh_keys.client_key,
        known_hosts_file=ssh_keys.known_hosts,
        connect_timeout=10.0,
        call_timeout=60.0,
        keepalive_interval=5.0,
        libvirt_transport=request.param,
    )


def volumes(local_conn: Any, pool: str) -> dict[str, Any]:
    handle = local_conn.storagePoolLookupByName(pool)
    handle.refresh(0)
    return {v.name(): v for v in handle.listAllVolumes(0)}


def marker_of(pool_dir: Path, image: Image) -> str:
    return (pool_dir / f"{base_volume_name(image)}.sha256").read_text()


def rpcs(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage().split()[0].removeprefix("rpc=")
        for r in caplog.records
        if r.name == "reconciler.libvirt" and r.getMessage().startswith("rpc=")
    ]


def random_image(tmp_path: Path, *, megabytes: int = 3) -> BlankImage:
    path = tmp_path / f"random-{secrets.token_hex(3)}.raw"
    path.write_bytes(secrets.token_bytes(megabytes * 1024 * 1024))
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    image = Image(
        key=f"rand-{secrets.token_hex(3)}",
        url=path.as_uri(),
        sha256=digest,
        format=ImageFormat.RAW,
    )
    return BlankImage(image, path, digest)


def test_a_verified_upload_writes_the_base_and_a_sha256_marker_and_a_second_ensure_changes_nothing(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    pool: tuple[str, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="reconciler.libvirt")
    adapter.ensure_image(blank_image.image, blank_image.path)

    base = pool[1] / base_volume_name(blank_image.image)
    assert base.read_bytes() == blank_image.path.read_bytes()
    assert marker_of(pool[1], blank_image.image) == (
        f"{blank_image.sha256}  {base_volume_name(blank_image.image)}\n"
    )
    caplog.clear()

    adapter.ensure_image(blank_image.image, blank_image.path)

    assert rpcs(caplog), "the trace must show the read-only calls"
    assert not set(rpcs(caplog)) & set(MUTATING_RPCS)


def test_an_image_without_a_pinned_sha256_is_marked_with_the_checksum_of_the_file(
    adapter: LibvirtHost, blank_image: BlankImage, pool: tuple[str, Path]
) -> None:
    unpinned = replace(blank_image.image, sha256=None)

    adapter.ensure_image(unpinned, blank_image.path)

    assert marker_of(pool[1], unpinned).split()[0] == blank_image.sha256


def test_a_changed_sha256_uploads_a_new_base_named_by_its_content_beside_the_old_one(
    adapter: LibvirtHost, pool: tuple[str, Path], tmp_path: Path
) -> None:
    first = random_image(tmp_path, megabytes=1)
    adapter.ensure_image(first.image, first.path)
    second_file = tmp_path / "second.raw"
    second_file.write_bytes(secrets.token_bytes(1024 * 1024))
    second_sha = hashlib.sha256(second_file.read_bytes()).hexdigest()
    changed = replace(first.image, sha256=second_sha)

    adapter.ensure_image(changed, second_file)

    assert base_volume_name(changed) == f"base-{first.image.key}-{second_sha[:12]}.raw"
    assert (pool[1] / base_volume_name(changed)).read_bytes() == second_file.read_bytes()
    assert marker_of(pool[1], changed) == f"{second_sha}  {base_volume_name(changed)}\n"
    assert (pool[1] / base_volume_name(first.image)).read_bytes() == first.path.read_bytes()
    assert marker_of(pool[1], first.image).split()[0] == first.sha256


def test_a_missing_marker_uploads_the_base_again(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    pool: tuple[str, Path],
    local_conn: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    adapter.ensure_image(blank_image.image, blank_image.path)
    volumes(local_conn, pool[0])[f"{base_volume_name(blank_image.image)}.sha256"].delete(0)
    caplog.set_level(logging.DEBUG, logger="reconciler.libvirt")

    adapter.ensure_image(blank_image.image, blank_image.path)

    assert "virStorageVolUpload" in rpcs(caplog)
    assert marker_of(pool[1], blank_image.image).split()[0] == blank_image.sha256


def test_a_wrong_sha256_fails_permanently_and_leaves_no_usable_base(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    pool: tuple[str, Path],
    local_conn: Any,
    make_spec: Callable[..., VmSpec],
) -> None:
    wrong = replace(blank_image.image, sha256="0" * 64)

    with pytest.raises(PermanentError, match="expected 0000"):
        adapter.ensure_image(wrong, blank_image.path)

    names = set(volumes(local_conn, pool[0]))
    assert base_volume_name(wrong) not in names
    assert f"{base_volume_name(wrong)}.sha256" not in names
    with pytest.raises(PermanentError, match="not uploaded and verified"):
        adapter.create(make_spec("never", wrong))


def test_a_truncated_upload_is_deleted_and_never_marked(
    make_host: Callable[..., LibvirtHost],
    pool: tuple[str, Path],
    local_conn: Any,
    tmp_path: Path,
) -> None:
    img = random_image(tmp_path)

    def half(path: Path) -> IO[bytes]:
        """A local file that ends early: a cache file truncated under the upload."""
        data = path.read_bytes()
        return io.BytesIO(data[: len(data) // 2])

    adapter = make_host(opener=half)

    with pytest.raises(PermanentError, match="local file changed while uploading"):
        adapter.ensure_image(img.image, img.path)

    names = set(volumes(local_conn, pool[0]))
    assert base_volume_name(img.image) not in names
    assert f"{base_volume_name(img.image)}.sha256" not in names


def test_a_link_lost_mid_upload_leaves_no_marker_and_the_next_attempt_uploads_in_full(
    make_host: Callable[..., LibvirtHost],
    sshd: Sshd,
    pool: tuple[str, Path],
    make_spec: Callable[..., VmSpec],
    tmp_path: Path,
) -> None:
    img = random_image(tmp_path, megabytes=4)
    cut = {"done": False}

    class CuttingFile(io.BytesIO):
        def read(self, size: int | None = -1) -> bytes:
            if self.tell() > 0 and not cut["done"]:
                cut["done"] = True
                for pid in sshd.sessions():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
            return super().read(size)

    adapter = make_host(opener=lambda path: CuttingFile(path.read_bytes()))

    with pytest.raises(TransientError):
        adapter.ensure_image(img.image, img.path)
    assert cut["done"]
    assert not (pool[1] / f"{base_volume_name(img.image)}.sha256").exists()
    with pytest.raises(PermanentError, match="not uploaded and verified"):
        adapter.create(make_spec("half", img.image))

    adapter.ensure_image(img.image, img.path)

    assert (pool[1] / base_volume_name(img.image)).read_bytes() == img.path.read_bytes()
    assert marker_of(pool[1], img.image).split()[0] == img.sha256


def test_a_new_sha256_leaves_the_old_base_under_its_overlay_and_the_vm_on_it_untouched(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    pool: tuple[str, Path],
    local_conn: Any,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
    tmp_path: Path,
) -> None:
    adapter.ensure_image(blank_image.image, blank_image.path)
    spec = make_spec("user", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.create(spec)
    newer = tmp_path / "newer.qcow2"
    newer.write_bytes(blank_image.path.read_bytes() + b"\0" * 512)
    changed = replace(blank_image.image, sha256=hashlib.sha256(newer.read_bytes()).hexdigest())

    adapter.ensure_image(changed, newer)

    old, new = (pool[1] / base_volume_name(i) for i in (blank_image.image, changed))
    assert old.read_bytes() == blank_image.path.read_bytes()
    assert new.read_bytes() == newer.read_bytes()
    assert backing_of(volumes(local_conn, pool[0])[spec.overlay_name]) == str(old)
    assert local_conn.lookupByName(spec.domain).isActive()


def test_an_unpinned_base_with_overlays_on_it_is_not_replaced_by_a_changed_download(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    pool: tuple[str, Path],
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
    tmp_path: Path,
) -> None:
    unpinned = replace(blank_image.image, sha256=None)
    adapter.ensure_image(unpinned, blank_image.path)
    spec = make_spec("user", unpinned)
    cleanup_domains.append(spec.domain)
    adapter.create(spec)
    newer = tmp_path / "newer.qcow2"
    newer.write_bytes(blank_image.path.read_bytes() + b"\0" * 512)
    base = pool[1] / base_volume_name(unpinned)
    assert base.name == f"base-{unpinned.key}.qcow2"

    with pytest.raises(PermanentError, match="base image in use by 1 overlays"):
        adapter.ensure_image(unpinned, newer)

    assert base.read_bytes() == blank_image.path.read_bytes()
    adapter.delete(spec.domain)
    adapter.ensure_image(unpinned, newer)
    assert base.read_bytes() == newer.read_bytes()


def backing_of(volume: Any) -> str | None:
    """The backing file a volume's own XML names."""
    return ET.fromstring(volume.XMLDesc(0)).findtext("backingStore/path")


def test_a_locally_classified_failure_keeps_the_healthy_connection(
    adapter: LibvirtHost,
    blank_image: BlankImage,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="reconciler.ssh")
    adapter.observe()

    with pytest.raises(PermanentError):
        adapter.ensure_image(replace(blank_image.image, sha256="f" * 64), blank_image.path)
    adapter.observe()

    connects = [r for r in caplog.records if r.getMessage().startswith("SSH connected")]
    assert len(connects) == 1
