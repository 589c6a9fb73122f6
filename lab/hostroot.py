"""The Debian 13 (trixie) root that lab hosts of kind ``debian13`` run libvirt from.

Built once per recipe, like the guest image: ``hostroot_rootfs.sh`` debootstraps trixie
(minbase) from the mirror apt is configured with and installs what docs/hosts.md tells an
operator to install (libvirt 11, QEMU 10, OVMF, sshd), plus virsh, dnsmasq and python3 for
the lab's own daemons. Cached as ``hostroot-trixie-<key>/`` under the image cache
(``lab/rootcache.py``), keyed by the scripts. Hosts never write into it: each host mounts it
as the lower layer of an overlay of its own (``holder.sh``).
"""

from __future__ import annotations

from pathlib import Path

from lab.rootcache import Recipe, Root

HERE = Path(__file__).resolve().parent
SUITE = "trixie"
RECIPE = Recipe(
    name=f"hostroot-{SUITE}",
    script=HERE / "hostroot_rootfs.sh",
    debcache=f"debcache-{SUITE}",
    packages=(("libvirt-daemon", "libvirt"), ("qemu-system-x86", "QEMU")),
)


def build(images_dir: Path) -> Root:
    """The cached root for the current recipe, debootstrapped first if needed."""
    return RECIPE.build(images_dir)
