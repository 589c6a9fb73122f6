#!/bin/bash
# Builds the Debian 12 (bookworm) root that proxyfleet's systemd unit is proven in: systemd
# as PID 1 (lab/systemdbox.py), proxyfleet's dependencies in a venv at /opt/proxyfleet as
# docs/operations.md installs them (part of the root's recipe: any change here changes the
# cache key).
# Usage: systemdroot_rootfs.sh ROOT_DIR MIRROR_URL SECURITY_URL DEB_CACHE_DIR WHEEL_DIR REQ...
set -euo pipefail
root=$1 mirror=$2 security=$3 debcache=$4 wheels=$5
shift 5
# shellcheck source=lab/rootfs_base.sh
. "$(dirname "$0")/rootfs_base.sh"
debootstrap_root "$root" "$mirror" "$security" "$debcache" bookworm

in_root apt-get update -qq
# systemd as PID 1 (dbus: the system bus its units expect), and what proxyfleet runs with:
# python3 with venv, libvirt's client library, git and ssh.
in_root apt-get install -y -qq --no-install-recommends \
	systemd systemd-sysv dbus python3 python3-venv libvirt0 git openssh-client procps
in_root apt-get clean
rm -rf "$root/var/lib/apt/lists"/* "$root/usr/sbin/policy-rc.d"

# The venv of docs/operations.md step 3 with proxyfleet's dependencies, from wheels built on
# the machine (libvirt-python against the same libvirt 9.0); proxyfleet itself goes into it
# when the test runs, from the checkout under test.
mkdir -p "$root/wheels"
mount --bind -o ro "$wheels" "$root/wheels"
in_root python3 -m venv /opt/proxyfleet
in_root env -i PATH=/usr/bin:/bin /opt/proxyfleet/bin/pip install -q --no-index \
	--find-links /wheels "$@"
umount "$root/wheels"
rmdir "$root/wheels"

# Boot quickly and quietly: no login prompts, no logind; a machine id made at boot.
in_root systemctl mask console-getty.service getty@.service systemd-logind.service
: >"$root/etc/machine-id"
echo proxyfleet-systemd >"$root/etc/hostname"
