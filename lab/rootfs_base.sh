# Sourced by the lab's root recipes (hostroot_rootfs.sh, systemdroot_rootfs.sh; part of each
# recipe's cache key). They run as root inside a private mount and PID namespace (see
# lab/rootcache.py), so every mount and every process they start ends with them.

# debootstrap_root ROOT MIRROR SECURITY DEBCACHE SUITE: SUITE (minbase) from MIRROR into
# ROOT, ready for apt in a chroot: /proc, /sys, /run and a /dev of its own mounted (not a
# bind of the machine's: package scripts run systemd-tmpfiles, which gave the real /dev/kvm
# the root's kvm group, gid 993 there, 108 on the machine, and libvirt's QEMU user lost KVM),
# no service ever started, apt pointed at MIRROR and SECURITY.
debootstrap_root() {
	local root=$1 mirror=$2 security=$3 debcache=$4 suite=$5 node name major minor
	mkdir -p "$debcache"
	debootstrap --variant=minbase --arch=amd64 --cache-dir="$debcache" "$suite" "$root" "$mirror"
	mount -t proc proc "$root/proc"
	mount -t sysfs sysfs "$root/sys"
	mount -t tmpfs -o mode=0755 lab-dev "$root/dev"
	for node in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
		IFS=: read -r name major minor <<<"$node"
		mknod -m 0666 "$root/dev/$name" c "$major" "$minor"
	done
	mkdir -p "$root/dev/pts" "$root/dev/shm"
	mount -t tmpfs tmpfs "$root/run"
	printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
	chmod 0755 "$root/usr/sbin/policy-rc.d"
	cat >"$root/etc/apt/sources.list" <<SOURCES
deb $mirror $suite main
deb $mirror $suite-updates main
deb $security $suite-security main
SOURCES
}

# in_root COMMAND...: COMMAND in the root, apt without questions.
in_root() { chroot "$root" env DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 "$@"; }
