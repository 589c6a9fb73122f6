"""``proxyfleet inventory`` and ``proxyfleet hosts check`` against the fixture host."""

from __future__ import annotations

import http.server
import json
import secrets
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hostservices import BlankImage, SshKeys

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.cli import main
from reconciler.core.load.inventory import parse_inventory
from reconciler.model import Host
from reconciler.model.vm import VmSpec

# A pump or watchdog thread dying with an exception is a bug, not noise.
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


# Loopback, port 9: sizing the image before a check gets a refusal at once (no DNS, no
# traffic off the box) and the image's size stays unknown, as for a source that is down.
IMAGE_URL = "http://127.0.0.1:9/blank.qcow2"
IMAGE_SHA = "ab" * 32


def fleet_repo(
    root: Path,
    host: Host,
    *,
    fleet: str = "it",
    image: str = "blank",
    url: str = IMAGE_URL,
    sha256: str = IMAGE_SHA,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "fleet.yaml").write_text(
        f"""apiVersion: proxyfleet/v1
kind: Fleet
metadata:
  name: {fleet}
spec:
  images:
    {image}:
      url: {url}
      sha256: {sha256}
      format: qcow2
  machineTypes:
    tiny:
      vcpus: 1
      memoryMiB: 256
      diskGiB: 1
  hosts:
    - name: {host.name}
      address: {host.address}
      port: {host.port}
      zone: {host.zone}
      pool: {host.pool}
      network:
        network: {host.network.name}
      domainType: qemu
      cpuMode: none
    - name: gone
      address: 127.0.0.1
      port: 1
      zone: {host.zone}
      network:
        bridge: br0
"""
    )
    return root


def access(keys: SshKeys) -> list[str]:
    return ["--ssh-key", str(keys.client_key), "--known-hosts", str(keys.known_hosts)]


def test_inventory_json_lists_owned_and_foreign_domains_and_marks_a_dead_host_unreachable(
    adapter: LibvirtHost,
    host: Host,
    ssh_keys: SshKeys,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = make_spec("cli-1", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    repo = fleet_repo(tmp_path / "repo", host)

    code = main(["inventory", "--repo", str(repo), *access(ssh_keys), "--json"])

    out, err = capsys.readouterr()
    assert out, err
    inventory = parse_inventory(out, file="stdout")
    seen = inventory.host(host.name)
    assert code == 3
    assert seen is not None and seen.reachable
    owned = {d.name: d.owner for d in seen.domains}
    assert owned[spec.domain] == spec.owner
    gone = inventory.host("gone")
    assert gone is not None and not gone.reachable and gone.error
    adapter.delete(spec.domain)


def test_inventory_table_names_the_owner_of_each_domain(
    adapter: LibvirtHost,
    host: Host,
    ssh_keys: SshKeys,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = make_spec("cli-2", blank_image.image)
    cleanup_domains.append(spec.domain)
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(spec)
    repo = fleet_repo(tmp_path / "repo", host)

    main(["inventory", "--repo", str(repo), *access(ssh_keys)])

    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if spec.domain in line)
    assert "running" in row and "it/cli-2" in row and spec.owner.digest[:8] in row
    assert any(line.startswith("gone") and "unreachable" in line for line in out.splitlines())
    adapter.delete(spec.domain)


def test_hosts_check_passes_for_a_ready_host_and_exits_2_naming_the_one_that_is_not(
    host: Host, ssh_keys: SshKeys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = fleet_repo(tmp_path / "repo", host)

    # --no-kvm-probe: the probe has its own tests (test_host_kvm_probe) and takes seconds.
    only = ["--host", host.name]
    ready = main(
        ["hosts", "check", "--no-kvm-probe", "--repo", str(repo), *access(ssh_keys), *only]
    )
    ready_out = capsys.readouterr().out
    both = main(
        ["hosts", "check", "--no-kvm-probe", "--repo", str(repo), *access(ssh_keys), "--json"]
    )
    reports = {r["host"]: r for r in json.loads(capsys.readouterr().out)}

    assert ready == 0, ready_out
    assert "1 of 1 hosts ready" in ready_out
    assert both == 3
    assert reports[host.name]["ok"] is True
    assert reports[host.name]["libvirt_version"]
    assert reports["gone"]["ok"] is False
    assert reports["gone"]["items"][0]["name"] == "ssh"


def test_hosts_check_fails_a_pool_too_small_for_the_largest_machine_type_with_the_numbers(
    host: Host, ssh_keys: SshKeys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = fleet_repo(tmp_path / "repo", host)
    fleet = repo / "fleet.yaml"
    fleet.write_text(
        fleet.read_text().replace(
            "      diskGiB: 1\n",
            "      diskGiB: 1\n    huge:\n      vcpus: 1\n      memoryMiB: 256\n"
            "      diskGiB: 1000000\n",
        )
    )

    only = ["--host", host.name]
    code = main(["hosts", "check", "--no-kvm-probe", "--repo", str(repo), *access(ssh_keys), *only])
    out = capsys.readouterr().out

    assert code == 3, out
    assert f"pool '{host.pool}': " in out
    assert "needs 1000000.0 GiB for one VM of the largest machine type (huge" in out


def test_without_the_interface_driver_a_bridge_is_checked_in_sysfs_and_a_missing_one_fails(
    adapter: LibvirtHost,
) -> None:
    import subprocess

    from reconciler.adapters.hypervisor.hostcheck.check import _Failed, bridge_from_sysfs

    bridge = "pfitbr0"
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    try:
        found = bridge_from_sysfs(adapter.session, bridge)
        with pytest.raises(_Failed) as missing:
            bridge_from_sysfs(adapter.session, "nosuchbr0")
        with pytest.raises(_Failed) as not_a_bridge:
            bridge_from_sysfs(adapter.session, "lo")
    finally:
        subprocess.run(["ip", "link", "del", bridge], check=True)

    assert (
        found
        == f"bridge {bridge!r} present (seen in /sys/class/net; libvirt has no interface driver)"
    )
    assert "bridge 'nosuchbr0' does not exist on the host" in str(missing.value)
    assert "bridge 'lo' does not exist" in str(not_a_bridge.value)


def test_hosts_check_counts_the_largest_disk_at_the_fleets_disk_overcommit_as_placement_does(
    host: Host,
    ssh_keys: SshKeys,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    local_conn: Any,
) -> None:
    # A machine type whose disk is 4x the pool's free space: too big at overcommit 1, and
    # placement puts it there at overcommit 8 (thin overlays), so hosts check must agree.
    local_conn.storagePoolLookupByName(host.pool).refresh(0)
    free_gib = local_conn.storagePoolLookupByName(host.pool).info()[3] / 2**30
    big = max(2, int(free_gib * 4))
    repo = fleet_repo(tmp_path / "repo", host)
    fleet = repo / "fleet.yaml"
    fleet.write_text(
        fleet.read_text().replace("      diskGiB: 1\n", f"      diskGiB: {big}\n")
        + "  policy:\n    overcommit:\n      disk: 8\n"
    )
    args = ["hosts", "check", "--no-kvm-probe", "--repo", str(repo), *access(ssh_keys)]
    args += ["--host", host.name]

    assert main(args) == 0, capsys.readouterr().out
    fleet.write_text(fleet.read_text().replace("      disk: 8\n", "      disk: 1\n"))
    code = main(args)
    out = capsys.readouterr().out
    assert code == 3, out
    assert f"needs {big:.1f} GiB for one VM of the largest machine type (tiny: {big} GiB" in out


class _Sized(http.server.BaseHTTPRequestHandler):
    """Answers HEAD with the Content-Length the test gives (the image it would serve)."""

    length = 0

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(self.length))
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def image_server() -> Iterator[tuple[str, type[_Sized]]]:
    handler = type("Sized", (_Sized,), {})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/hc.qcow2", handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_hosts_check_fails_a_pool_without_room_for_the_base_images_it_lacks_with_the_numbers(
    host: Host,
    pool: tuple[str, Path],
    ssh_keys: SshKeys,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    local_conn: Any,
    image_server: tuple[str, type[_Sized]],
) -> None:
    # The image is as large as the pool's free space less half a GiB: one VM of 1 GiB
    # fits without it, not with it. Once the pool holds the verified base (the base and
    # its marker), the same pool passes.
    url, handler = image_server
    local_conn.storagePoolLookupByName(host.pool).refresh(0)
    free = local_conn.storagePoolLookupByName(host.pool).info()[3]
    assert free > 2 * 2**30, "the test pool's filesystem needs 2 GiB free"
    handler.length = free - 2**29
    sha = secrets.token_hex(32)  # a base name no other test shares
    repo = fleet_repo(tmp_path / "repo", host, image="hcimage", url=url, sha256=sha)
    state = tmp_path / "state"
    args = ["hosts", "check", "--repo", str(repo), *access(ssh_keys), "--host", host.name]
    args += ["--state-dir", str(state)]

    code = main(args)
    out = capsys.readouterr().out

    assert code == 3, out
    needs = (handler.length + 2**30) / 2**30
    assert (
        f"needs {needs:.1f} GiB for one VM of the largest machine type (tiny: 1 GiB disk; "
        f"tiny: 256 MiB) and the base images it lacks; base images not in the pool yet: "
        f"hcimage {handler.length / 2**30:.1f} GiB"
    ) in out
    assert not (state / "images").exists() or not any((state / "images").iterdir())

    base = pool[1] / f"base-hcimage-{sha[:12]}.qcow2"
    try:
        base.write_bytes(b"")
        base.with_name(base.name + ".sha256").write_text(f"{sha}  {base.name}\n")
        code = main(args)
        out = capsys.readouterr().out
        assert code == 0, out
        assert "base images not in the pool yet" not in out
    finally:
        base.unlink(missing_ok=True)
        base.with_name(base.name + ".sha256").unlink(missing_ok=True)
        local_conn.storagePoolLookupByName(host.pool).refresh(0)


def test_hosts_check_names_a_base_image_of_unknown_size_and_counts_the_vm(
    host: Host, ssh_keys: SshKeys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = fleet_repo(tmp_path / "repo", host)  # its image's source refuses: size unknown
    args = ["hosts", "check", "--repo", str(repo), *access(ssh_keys), "--host", host.name]

    code = main([*args, "--state-dir", str(tmp_path / "state")])
    out = capsys.readouterr().out

    assert code == 0, out
    assert "base images not in the pool yet: blank (size not known yet)" in out
