#!/bin/bash
# Builds the Debian 13 (trixie) root that lab hosts of kind debian13 run their daemons from
# (part of the root's recipe: any change here changes the cache key). Runs as root inside a
# private mount and PID namespace (see lab/hostroot.py), so every mount and every process it
# starts ends with it.
# Usage: hostroot_rootfs.sh ROOT_DIR MIRROR_URL SECURITY_URL DEB_CACHE_DIR
set -euo pipefail
root=$1 mirror=$2 security=$3 debcache=$4
suite=trixie

mkdir -p "$debcache"
debootstrap --variant=minbase --arch=amd64 --cache-dir="$debcache" "$suite" "$root" "$mirror"

mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
# A /dev of its own, not the machine's: package scripts run systemd-tmpfiles, which gives
# /dev/kvm the root's kvm group (gid 993 there, 108 on the machine). On a bind of the real
# /dev that changed the machine's /dev/kvm, and libvirt's QEMU user lost KVM.
mount -t tmpfs -o mode=0755 lab-dev "$root/dev"
for node in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
	IFS=: read -r name major minor <<<"$node"
	mknod -m 0666 "$root/dev/$name" c "$major" "$minor"
done
mkdir -p "$root/dev/pts" "$root/dev/shm"
mount -t tmpfs tmpfs "$root/run"
trap 'umount -R "$root/run" "$root/dev" "$root/sys" "$root/proc" 2>/dev/null || true' EXIT

# Never start a service while building.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"

cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
SOURCES

in_root() { chroot "$root" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }
in_root apt-get update -qq
# What docs/hosts.md tells an operator to install (no Recommends: so no interface driver,
# and hosts check must see the bridge another way), plus what the lab runs beside it:
# virsh, dnsmasq for the guests' DHCP, python3 for the probe server, ip and ps.
in_root apt-get install -y -qq --no-install-recommends \
	libvirt-daemon-system qemu-system-x86 qemu-utils ovmf openssh-server \
	libvirt-clients dnsmasq-base python3 iproute2 procps
in_root apt-get clean
rm -rf "$root/var/lib/apt/lists"/*
