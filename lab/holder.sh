#!/bin/bash
# The long-lived process that owns one lab host's private mount namespace. Started by
# `python -m lab up` as `ip netns exec pfhostN unshare --mount --propagation private
# holder.sh STATE_DIR NAME [ROOT BIND...]`; every daemon of the host is entered into its
# namespaces with nsenter. When the last process of the host ends, the kernel drops these
# mounts with the namespace.
#
# Without ROOT the host runs the machine's own binaries (Debian 12). With ROOT (a cached
# Debian 13 tree, lab/hostroot.py) the host gets an overlay of it (writes go to STATE_DIR,
# the cached tree stays clean), the BIND directories (the repo, the lab state) at their own
# paths inside, and pivot_root into it: nsenter lands every daemon in that root, and so does
# libvirt when it joins a QEMU's mount namespace with setns(), which a chroot would escape.
set -euo pipefail
st=$1 name=$2 root=${3:-}
shift 2
[ $# -gt 0 ] && shift
new=
if [ -n "$root" ]; then
	new=$st/root
	mkdir -p "$new" "$st/root-upper" "$st/root-work"
	mount -t overlay lab-root -o "lowerdir=$root,upperdir=$st/root-upper,workdir=$st/root-work" "$new"
	mount -t proc proc "$new/proc"
	mount -t sysfs sysfs "$new/sys"
	mount --rbind /dev "$new/dev"
	for dir in "$@"; do
		mkdir -p "$new$dir"
		mount --bind "$dir" "$new$dir"
	done
	mount -t tmpfs -o mode=1777 lab-tmp "$new/tmp"
fi
mount -t tmpfs -o mode=0755 lab-run "$new/run"
mkdir -p "$new/run/libvirt" "$new/run/sshd" "$new/run/lock"
chmod 0755 "$new/run/sshd"
mount --bind "$st/etc-libvirt" "$new/etc/libvirt"
mount --bind "$st/var-lib-libvirt" "$new/var/lib/libvirt"
mount --bind "$st/log" "$new/var/log/libvirt"
mount -t tmpfs -o mode=0711 lab-cache "$new/var/cache/libvirt"
hostname "$name"
if [ -n "$root" ]; then
	cd "$new"
	mkdir -p .oldroot
	pivot_root . .oldroot
	cd /
	umount -l /.oldroot
fi
touch "$st/holder.ready"
exec sleep infinity
