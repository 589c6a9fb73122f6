#!/bin/bash
# The long-lived process that owns one lab host's private mount namespace. Started by
# `python -m lab up` as `ip netns exec pfhostN unshare --mount --propagation private
# holder.sh STATE_DIR NAME`; every daemon of the host is entered into its namespaces with nsenter.
# When the last process of the host ends, the kernel drops these mounts with the namespace.
set -euo pipefail
st=$1
mount -t tmpfs -o mode=0755 lab-run /run
mkdir -p /run/libvirt /run/sshd /run/lock
chmod 0755 /run/sshd
mount --bind "$st/etc-libvirt" /etc/libvirt
mount --bind "$st/var-lib-libvirt" /var/lib/libvirt
mount --bind "$st/log" /var/log/libvirt
mount -t tmpfs -o mode=0711 lab-cache /var/cache/libvirt
hostname "$2"
touch "$st/holder.ready"
exec sleep infinity
