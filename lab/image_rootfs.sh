#!/bin/bash
# Builds the guest root file system tree for the lab image (part of the image recipe:
# any change here changes the cache key). Runs as root inside a private mount and PID
# namespace (see lab/imagebuild.py), so every mount and every process it starts ends with it.
# Usage: image_rootfs.sh ROOT_DIR MIRROR_URL SECURITY_URL DEB_CACHE_DIR ROOT_UUID
set -euo pipefail
root=$1 mirror=$2 security=$3 debcache=$4 root_uuid=$5
suite=bookworm

mkdir -p "$debcache"
debootstrap --variant=minbase --arch=amd64 --cache-dir="$debcache" \
	--include=systemd-sysv,udev,kmod,apt \
	"$suite" "$root" "$mirror"

mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount -t tmpfs tmpfs "$root/run"
trap 'umount -R "$root/run" "$root/dev" "$root/sys" "$root/proc" 2>/dev/null || true' EXIT

# Never start a service inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"

cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
SOURCES

# Before the kernel: initramfs-tools reads fstab to put fsck.ext4 into the initrd.
cat >"$root/etc/fstab" <<FSTAB
UUID=$root_uuid / ext4 errors=remount-ro 0 1
FSTAB

in_root() { chroot "$root" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }
# A small initramfs, written before the kernel so that it is built once: the lab's domains
# always have a virtio disk (domainxml.py), so the initramfs needs only virtio and ext4.
# MODULES=most (the default) made a 36 MB initrd whose unpacking and udev pass took ~15 s
# of a TCG boot; the seed CD-ROM's drivers load later from the root as usual.
mkdir -p "$root/etc/initramfs-tools/conf.d" "$root/usr/share/initramfs-tools/modules.d"
echo MODULES=list >"$root/etc/initramfs-tools/conf.d/proxyfleet-lab"
printf '%s\n' virtio_pci virtio_blk ext4 crc32c_generic \
	>"$root/usr/share/initramfs-tools/modules.d/proxyfleet-lab"
# Drivers for emulated devices no proxy uses, which udev would load at every boot (each
# modprobe is a second or more under TCG): KVM inside the guest (the TCG CPU model offers
# SVM), VGA and DRM, parallel port, PC speaker, watchdog, SMBus, PS/2 mouse, SCSI generic.
mkdir -p "$root/etc/modprobe.d"
printf 'blacklist %s\n' kvm kvm_amd kvm_intel irqbypass bochs drm drm_kms_helper \
	drm_vram_helper ttm parport_pc parport ppdev lp pcspkr iTCO_wdt iTCO_vendor_support \
	intel_pmc_bxt lpc_ich i2c_i801 i2c_smbus psmouse serio_raw sg ccp \
	>"$root/etc/modprobe.d/proxyfleet-lab.conf"

in_root apt-get update -qq
# linux-image-amd64 (not -cloud) so SATA CD-ROM seeds and any disk bus the domain uses work.
in_root apt-get install -y -qq --no-install-recommends \
	linux-image-amd64 initramfs-tools \
	cloud-init cloud-guest-utils qemu-guest-agent squid \
	ifupdown isc-dhcp-client iproute2 netbase iputils-ping \
	openssh-server sudo ca-certificates procps less e2fsprogs curl

cat >"$root/etc/network/interfaces" <<'IFACES'
auto lo
iface lo inet loopback
source /etc/network/interfaces.d/*
IFACES

# NoCloud only: no network metadata service is ever probed from inside the lab.
# Under TCG every boot's CPU counts (docs/lab.md, "What a guest's boot costs"): one ed25519
# host key instead of RSA 3072 + ECDSA + ed25519 (~10 s of config-ssh), no keys printed to
# the console (~2 s), no grub-dpkg (~2 s; the image boots by systemd-boot or syslinux) and no
# growpart/resizefs (8-9 s: a shell script forking sfdisk, partx and udevadm per step; the root
# keeps the image's 768 MiB of free space, which a proxy with no cache never fills).
cat >"$root/etc/cloud/cloud.cfg.d/90-proxyfleet-lab.cfg" <<'CLOUD'
datasource_list: [ NoCloud, None ]
locale: C.UTF-8
ssh_genkeytypes: [ ed25519 ]
ssh:
  emit_keys_to_console: false
grub_dpkg:
  enabled: false
growpart:
  mode: "off"
resize_rootfs: false
CLOUD

# e2scrub_reap looks for LVM snapshots at every boot (there is no LVM) and took ~16 s of a
# TCG boot's two busiest minutes; its weekly timer has nothing to scrub either.
in_root systemctl mask e2scrub_reap.service e2scrub_all.timer

# squid is installed (the lab has no mirror for a proxy's `packages: [squid]`) but off, with
# Debian's stock config: like a cloud image before cloud-init installs it, nothing answers on
# 3128 until the proxy's own user-data writes a config and enables and starts squid.
# Disabled, not masked: user-data's `systemctl enable squid` must still work.
in_root systemctl disable squid
in_root update-rc.d squid disable
state=$(in_root systemctl is-enabled squid || true)
if [ "$state" != disabled ]; then
	echo "squid.service is '$state' in the image, expected disabled" >&2
	exit 1
fi

echo debian >"$root/etc/hostname"
: >"$root/etc/machine-id"
rm -f "$root/var/lib/dbus/machine-id" "$root"/etc/ssh/ssh_host_*
in_root apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/log/*.log "$root"/tmp/* "$root/usr/sbin/policy-rc.d"
