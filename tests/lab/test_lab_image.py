"""The lab image on lab hosts, through plain libvirt: both firmwares boot, DHCP on the host's
bridge gives an address, the guest agent reports it, and squid, off in the image until the
guest's user-data configures and starts it, relays the lab's 204 probe."""

from __future__ import annotations

import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from labutil import SQUID_BEFORE, layout, probe_through, squid_user_data

from lab.boottest import make_seed

VIRSH = "virsh -q -c qemu:///system"


def ssh(lab: dict[str, Any], host: str, command: str, *, stdin: str | None = None) -> str:
    address = next(h["address"] for h in lab["hosts"] if h["name"] == host)
    proc = subprocess.run(
        [
            "ssh",
            "-i",
            lab["sshKey"],
            "-o",
            f"UserKnownHostsFile={lab['knownHosts']}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "BatchMode=yes",
            f"root@{address}",
            command,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if proc.returncode != 0:
        raise AssertionError(f"{host}: {command}: {proc.stderr.strip()}")
    return proc.stdout


def domain_xml(name: str, firmware: str, disk: str, seed: str) -> str:
    dom = ET.Element("domain", type="qemu")
    ET.SubElement(dom, "name").text = name
    ET.SubElement(dom, "memory", unit="MiB").text = "1024"
    ET.SubElement(dom, "vcpu").text = "1"
    os_el = ET.SubElement(dom, "os")
    ET.SubElement(os_el, "type", arch="x86_64", machine="q35").text = "hvm"
    if firmware == "uefi":
        os_el.set("firmware", "efi")
        fw = ET.SubElement(os_el, "firmware")
        ET.SubElement(fw, "feature", enabled="no", name="secure-boot")
    ET.SubElement(ET.SubElement(dom, "features"), "acpi")
    devices = ET.SubElement(dom, "devices")
    for path, device, bus, fmt in (
        (disk, "disk", "virtio", "qcow2"),
        (seed, "cdrom", "sata", "raw"),
    ):
        el = ET.SubElement(devices, "disk", type="file", device=device)
        ET.SubElement(el, "driver", name="qemu", type=fmt)
        ET.SubElement(el, "source", file=path)
        ET.SubElement(el, "target", dev="vda" if device == "disk" else "sda", bus=bus)
    nic = ET.SubElement(devices, "interface", type="bridge")
    ET.SubElement(nic, "source", bridge="br0")
    ET.SubElement(nic, "model", type="virtio")
    ET.SubElement(devices, "serial", type="pty")
    channel = ET.SubElement(devices, "channel", type="unix")
    ET.SubElement(channel, "target", type="virtio", name="org.qemu.guest_agent.0")
    return ET.tostring(dom, encoding="unicode")


def agent_ipv4(lab: dict[str, Any], host: str, name: str) -> str | None:
    try:
        out = ssh(lab, host, f"{VIRSH} domifaddr {name} --source agent")
    except AssertionError:
        return None  # the agent is not up yet
    for line in out.splitlines():
        fields = line.split()
        if len(fields) >= 4 and fields[-2] == "ipv4" and not fields[-1].startswith("127."):
            return fields[-1].split("/")[0]
    return None


def test_the_image_boots_by_uefi_and_by_bios_and_its_squid_relays_the_lab_probe(
    lab: dict[str, Any],
) -> None:
    image = Path(lab["image"]["path"])
    first, second = (h["name"] for h in lab["hosts"][:2])
    guests = {first: "uefi", second: "bios"}
    started = time.monotonic()
    names = {}
    try:
        for host, firmware in guests.items():
            name = f"labtest-{firmware}"
            names[host] = name
            pool = layout(host).state / "var-lib-libvirt" / "images"
            disk, seed = (
                f"/var/lib/libvirt/images/{name}.qcow2",
                f"/var/lib/libvirt/images/{name}-seed.iso",
            )
            subprocess.run(
                [
                    "qemu-img",
                    "create",
                    "-q",
                    "-f",
                    "qcow2",
                    "-b",
                    str(image),
                    "-F",
                    "qcow2",
                    str(pool / f"{name}.qcow2"),
                    "4G",
                ],
                check=True,
            )
            make_seed(
                pool / f"{name}-seed.iso",
                user_data=squid_user_data(name).encode(),
                instance_id=f"{name}-{time.time_ns()}",
                hostname=name,
            )
            ssh(
                lab,
                host,
                f"cat > /tmp/{name}.xml && {VIRSH} define /tmp/{name}.xml && {VIRSH} start {name}",
                stdin=domain_xml(name, firmware, disk, seed),
            )
        pending = dict(names)
        results: dict[str, tuple[float, float]] = {}
        ips: dict[str, tuple[str, float]] = {}
        while pending and time.monotonic() - started < 900:
            for host, name in list(pending.items()):
                if host not in ips:
                    ip = agent_ipv4(lab, host, name)
                    if ip is not None:
                        ips[host] = (ip, time.monotonic() - started)
                probe = probe_through(ips[host][0], lab["probeUrl"]) if host in ips else None
                if probe is not None and probe.status == 204:
                    # The Via header: squid was stopped and disabled until runcmd started it.
                    assert f"{name}-v1-{SQUID_BEFORE}" in probe.via, probe
                    results[host] = (ips[host][1], time.monotonic() - started)
                    del pending[host]
            time.sleep(3)
        for host, (ip_at, ok_at) in results.items():
            print(
                f"{guests[host]} guest on {host}: agent IP after {ip_at:.0f}s, 204 via squid "
                f"after {ok_at:.0f}s"
            )
        assert not pending, f"no 204 through squid from {sorted(pending)}; IPs seen: {ips}"
    finally:
        for host, name in names.items():
            ssh(
                lab,
                host,
                f"{VIRSH} destroy {name} >/dev/null 2>&1; "
                f"{VIRSH} undefine --nvram {name} >/dev/null 2>&1; "
                f"rm -f /var/lib/libvirt/images/{name}.qcow2 "
                f"/var/lib/libvirt/images/{name}-seed.iso /tmp/{name}.xml",
            )
