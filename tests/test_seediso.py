"""The NoCloud seed ISO, read back with pycdlib; the vendor-data MIME, read back with email."""

from __future__ import annotations

import email
import io
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pycdlib
import pytest

from reconciler.core.render.guestagent import GUEST_AGENT_SCRIPT, SCRIPT_FILENAME, vendor_data
from reconciler.core.render.seediso import seed_iso
from reconciler.model import CloudInit, Host, HostNetwork, Image, MachineType, Owner
from reconciler.model.vm import VmSpec

# Bytes that a YAML round-trip, a line-ending fix-up or an encoding slip would change.
USER_DATA = (
    "#cloud-config\r\n"
    "# comment kept\n"
    "version: 1.10\n"
    "write_files:\n"
    "  - content: 'caf\u00e9 \u2603 tab\there'\n"
    "    path: /etc/x\n"
    "no_newline_at_end: yes"
)
JINJA_USER_DATA = "## template: jinja\n#cloud-config\nhostname: {{ v1.local_hostname }}\n"


def make_spec(
    *,
    user_data: str = USER_DATA,
    vendor: str | None = None,
    network: str | None = None,
    agent: bool = True,
) -> VmSpec:
    return VmSpec(
        domain="pf-lab-edge-1-01234567",
        proxy="edge-1",
        host=Host(name="hv1", address="10.0.0.1", zone="a", network=HostNetwork("bridge", "br0")),
        image=Image(key="debian-12", url="https://example.org/d.qcow2"),
        machine_type=MachineType(key="small", vcpus=1, memory_mib=512, disk_gib=4),
        cloud_init=CloudInit(user_data=user_data, vendor_data=vendor, network_config=network),
        install_guest_agent=agent,
        owner=Owner(fleet="lab", proxy="edge-1", digest="01234567"),
    )


def read_iso(data: bytes) -> tuple[str, dict[str, bytes]]:
    """(volume label, {Rock Ridge name: bytes}); also checks Joliet gives the same bytes."""
    iso = pycdlib.PyCdlib()
    iso.open_fp(io.BytesIO(data))
    try:
        label = iso.pvd.volume_identifier.decode().strip()
        files: dict[str, bytes] = {}
        for record in iso.list_children(rr_path="/"):
            if record.is_dot() or record.is_dotdot():
                continue
            name = record.rock_ridge.name().decode()
            rr, joliet = io.BytesIO(), io.BytesIO()
            iso.get_file_from_iso_fp(rr, rr_path=f"/{name}")
            iso.get_file_from_iso_fp(joliet, joliet_path=f"/{name}")
            assert rr.getvalue() == joliet.getvalue(), name
            files[name] = rr.getvalue()
        assert iso.joliet_vd is not None
        assert iso.has_rock_ridge()
    finally:
        iso.close()
    return label, files


def test_seed_has_the_cidata_label_and_the_nocloud_files() -> None:
    label, files = read_iso(seed_iso(make_spec()))
    assert label == "cidata"
    assert set(files) == {"meta-data", "user-data", "vendor-data"}


def test_blkid_sees_an_iso9660_filesystem_labelled_cidata(tmp_path: Path) -> None:
    # cloud-init's NoCloud finds the seed by filesystem label through blkid.
    blkid = shutil.which("blkid") or "/sbin/blkid"
    image = tmp_path / "seed.iso"
    image.write_bytes(seed_iso(make_spec()))
    result = subprocess.run(
        [blkid, "-p", "-o", "export", str(image)], capture_output=True, text=True, check=True
    )
    assert "LABEL=cidata" in result.stdout.splitlines()
    assert "TYPE=iso9660" in result.stdout.splitlines()


@pytest.mark.parametrize("user_data", [USER_DATA, JINJA_USER_DATA, "", "#!/bin/sh\necho hi\n"])
def test_user_data_reaches_the_seed_byte_for_byte(user_data: str) -> None:
    _, files = read_iso(seed_iso(make_spec(user_data=user_data)))
    assert files["user-data"] == user_data.encode("utf-8")


def test_meta_data_names_the_domain_as_instance_and_the_proxy_as_hostname() -> None:
    _, files = read_iso(seed_iso(make_spec()))
    # JSON is YAML; cloud-init loads meta-data as YAML.
    assert json.loads(files["meta-data"]) == {
        "instance-id": "pf-lab-edge-1-01234567",
        "local-hostname": "edge-1",
    }


def test_network_config_is_written_only_when_given() -> None:
    network = "version: 2\nethernets:\n  id0:\n    match: {name: 'en*'}\n    dhcp4: true\n"
    _, with_network = read_iso(seed_iso(make_spec(network=network)))
    assert with_network["network-config"] == network.encode()
    _, without = read_iso(seed_iso(make_spec()))
    assert "network-config" not in without


def test_vendor_data_is_the_agent_script_when_the_user_has_none() -> None:
    _, files = read_iso(seed_iso(make_spec()))
    assert files["vendor-data"] == GUEST_AGENT_SCRIPT.encode()
    assert files["vendor-data"].startswith(b"#!/bin/sh\n")


def test_vendor_data_is_the_users_alone_when_the_agent_is_off() -> None:
    vendor = "#cloud-config\npackages: [htop]\n"
    _, files = read_iso(seed_iso(make_spec(vendor=vendor, agent=False)))
    assert files["vendor-data"] == vendor.encode()


def test_no_vendor_data_at_all_when_the_agent_is_off_and_the_user_has_none() -> None:
    _, files = read_iso(seed_iso(make_spec(agent=False)))
    assert "vendor-data" not in files


def _parts(vendor: bytes) -> list[email.message.Message]:
    message = email.message_from_bytes(vendor)
    assert message.get_content_type() == "multipart/mixed"
    return [p for p in message.walk() if not p.is_multipart()]


def test_vendor_data_is_mime_with_the_script_and_the_users_part_when_both_are_on() -> None:
    vendor = "#cloud-config\r\npackages: [htop]\nruncmd: ['caf\u00e9']"
    _, files = read_iso(seed_iso(make_spec(vendor=vendor)))
    raw = files["vendor-data"]
    # cloud-init treats a document as MIME when this header is in its first 4 KiB.
    assert b"mime-version:" in raw[:4096].lower()
    script, user = _parts(raw)
    assert script.get_content_type() == "text/x-shellscript"
    assert script.get_filename() == SCRIPT_FILENAME
    assert script.get_payload(decode=True) == GUEST_AGENT_SCRIPT.encode()
    # text/plain: cloud-init re-derives the type from the payload's own header.
    assert user.get_content_type() == "text/plain"
    assert user.get_payload(decode=True) == vendor.encode("utf-8")


def test_a_users_mime_vendor_data_keeps_its_own_parts_and_types() -> None:
    users = (
        'Content-Type: multipart/mixed; boundary="XYZ"\n'
        "MIME-Version: 1.0\n\n"
        "--XYZ\n"
        "Content-Type: text/cloud-config\n\n"
        "#cloud-config\npackages: [htop]\n\n"
        "--XYZ\n"
        "Content-Type: text/x-shellscript\n\n"
        "#!/bin/sh\necho --XYZ\n\n"
        "--XYZ--\n"
    )
    raw = vendor_data(install_guest_agent=True, user_vendor_data=users)
    assert raw is not None
    script, config, shell = _parts(raw)
    assert script.get_payload(decode=True) == GUEST_AGENT_SCRIPT.encode()
    assert config.get_content_type() == "text/cloud-config"
    assert config.get_payload(decode=True) == b"#cloud-config\npackages: [htop]\n"
    assert shell.get_content_type() == "text/x-shellscript"
    assert shell.get_payload(decode=True) == b"#!/bin/sh\necho --XYZ\n"


def test_the_same_spec_gives_the_same_files() -> None:
    spec = make_spec(vendor="#!/bin/sh\ntrue\n", network="version: 2\n")
    assert read_iso(seed_iso(spec)) == read_iso(seed_iso(replace(spec)))


def test_the_agent_script_installs_enables_and_starts_the_agent_idempotently() -> None:
    script = GUEST_AGENT_SCRIPT
    assert script.startswith("#!/bin/sh\n")
    assert "apt-get" in script and "dnf" in script and "yum" in script
    assert "systemctl enable --now" in script
    assert "qemu-guest-agent" in script
    assert "have_agent" in script  # installs only when missing


def test_the_agent_script_is_valid_posix_shell() -> None:
    sh = shutil.which("dash") or shutil.which("sh")
    assert sh is not None
    result = subprocess.run([sh, "-n"], input=GUEST_AGENT_SCRIPT, text=True, check=False)
    assert result.returncode == 0


@pytest.fixture
def file_opens() -> Iterator[list[tuple[Any, ...]]]:
    """Every file the interpreter opens while the test body runs (audit hook)."""
    seen: list[tuple[Any, ...]] = []
    active = [True]

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if active[0] and event in ("open", "os.mkdir", "tempfile.mkstemp", "tempfile.mkdtemp"):
            seen.append((event, *args))

    # Warm up imports first so lazily imported modules do not count.
    seed_iso(make_spec(vendor="#!/bin/sh\n", network="version: 2\n"))
    sys.addaudithook(hook)
    try:
        yield seen
    finally:
        active[0] = False


def test_building_a_seed_opens_no_file_at_all(file_opens: list[tuple[Any, ...]]) -> None:
    # The seed's writer needed a writable /tmp and failed under a read-only rootfs.
    seed_iso(make_spec(vendor="#cloud-config\n", network="version: 2\n"))
    assert file_opens == []


def test_the_audit_hook_would_see_a_file_open(
    file_opens: list[tuple[Any, ...]], tmp_path: Path
) -> None:
    (tmp_path / "x").write_bytes(b"")
    assert any(event == "open" for event, *_ in file_opens)


def test_cloud_init_content_never_reaches_a_log_line(caplog: pytest.LogCaptureFixture) -> None:
    canary = "CANARY-7f3a9c-never-logged"
    spec = make_spec(
        user_data=f"#cloud-config\n# {canary}\n",
        vendor=f"#!/bin/sh\necho {canary}\n",
        network=f"# {canary}\nversion: 2\n",
    )
    with caplog.at_level(1):
        seed_iso(spec)
        repr(spec)
    assert canary not in repr(spec)
    assert all(canary not in record.getMessage() for record in caplog.records)
