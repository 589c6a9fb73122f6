#!/bin/bash
# Builds the Debian 13 (trixie) root that lab hosts of kind debian13 run their daemons from
# (part of the root's recipe: any change here changes the cache key).
# Usage: hostroot_rootfs.sh ROOT_DIR MIRROR_URL SECURITY_URL DEB_CACHE_DIR
set -euo pipefail
root=$1 mirror=$2 security=$3 debcache=$4
# shellcheck source=lab/rootfs_base.sh
. "$(dirname "$0")/rootfs_base.sh"
debootstrap_root "$root" "$mirror" "$security" "$debcache" trixie

in_root apt-get update -qq
# What docs/hosts.md tells an operator to install (no Recommends: so no interface driver,
# and hosts check must see the bridge another way), plus what the lab runs beside it:
# virsh, dnsmasq for the guests' DHCP, python3 for the probe server, ip and ps.
in_root apt-get install -y -qq --no-install-recommends \
	libvirt-daemon-system qemu-system-x86 qemu-utils ovmf openssh-server \
	libvirt-clients dnsmasq-base python3 iproute2 procps
in_root apt-get clean
rm -rf "$root/var/lib/apt/lists"/*
