#!/bin/bash
# systemd as PID 1 of a container of its own, on a machine whose PID 1 is not systemd
# (lab/systemdbox.py starts it; tests/integration/test_systemd_unit.py uses it).
#
#   systemdbox.sh STATE_DIR ROOT [DIR...]
#
# Outside: joins the cgroups listed in STATE_DIR/cgroups (one cgroup.procs path a line, made
# for it below its own cgroups), then re-runs itself in new mount, PID, UTS, IPC and cgroup
# namespaces; the network namespace stays the machine's, so 127.0.0.1 is shared. Inside, as
# PID 1: an overlay of ROOT (writes go to STATE_DIR, the cached tree stays clean), /proc,
# a read-only /sys, a /dev of its own, every cgroup hierarchy of the machine mounted writable
# at its place (the cgroup namespace makes the joined cgroups their roots, so systemd's
# MemoryMax=, TasksMax= and DevicePolicy= act on real controllers), each DIR bound read-only
# at its own path, pivot_root, and exec systemd.
set -euo pipefail
st=$1 root=$2
shift 2

if [ "${SYSTEMDBOX_INSIDE:-}" != 1 ]; then
	while read -r procs; do
		echo $$ >"$procs"
	done <"$st/cgroups"
	export SYSTEMDBOX_INSIDE=1
	exec unshare --mount --pid --uts --ipc --cgroup --fork --kill-child=SIGKILL \
		--propagation private "$0" "$st" "$root" "$@"
fi

new=$st/root
mkdir -p "$new" "$st/upper" "$st/work"
mount -t overlay pf-systemd -o "lowerdir=$root,upperdir=$st/upper,workdir=$st/work" "$new"
mount -t proc proc "$new/proc"
mount -t sysfs -o ro sysfs "$new/sys"

mount -t tmpfs -o mode=0755,nosuid sd-dev "$new/dev"
for node in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
	IFS=: read -r name major minor <<<"$node"
	mknod -m 0666 "$new/dev/$name" c "$major" "$minor"
done
mkdir -p "$new/dev/pts" "$new/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$new/dev/pts"
ln -s pts/ptmx "$new/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev sd-shm "$new/dev/shm"
ln -s /proc/self/fd "$new/dev/fd"
ln -s /proc/self/fd/0 "$new/dev/stdin"
ln -s /proc/self/fd/1 "$new/dev/stdout"
ln -s /proc/self/fd/2 "$new/dev/stderr"
# systemd writes its boot status to the console: the box's log (this script's stdout).
touch "$new/dev/console"
mount --bind "$st/console.log" "$new/dev/console"

# The machine's cgroup layout, each hierarchy rooted at the joined cgroup.
if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
	mount -t cgroup2 cgroup2 "$new/sys/fs/cgroup"
else
	mount -t tmpfs -o mode=0755,nosuid,nodev,noexec sd-cgroup "$new/sys/fs/cgroup"
	while read -r point fstype options; do
		case $point in /sys/fs/cgroup/*) ;; *) continue ;; esac
		mkdir -p "$new$point"
		if [ "$fstype" = cgroup2 ]; then
			mount -t cgroup2 cgroup2 "$new$point"
		elif [ "$fstype" = cgroup ]; then
			wanted=$(tr ',' '\n' <<<"$options" | grep -Ev '^(rw|ro)$' | paste -sd,)
			case $wanted in name=*) wanted=none,$wanted ;; esac
			mount -t cgroup -o "$wanted" cgroup "$new$point"
		fi
	done < <(awk '{ split($0, m, " - "); split(m[1], l, " "); split(m[2], r, " ");
		print l[5], r[1], r[3] }' /proc/self/mountinfo)
fi

for dir in "$@"; do
	mkdir -p "$new$dir"
	mount --bind "$dir" "$new$dir"
	mount -o remount,bind,ro "$new$dir"
done

hostname proxyfleet-systemd
cd "$new"
mkdir -p .oldroot
pivot_root . .oldroot
cd /
umount -l /.oldroot
rmdir /.oldroot
exec env -i container=proxyfleet-systemdbox /lib/systemd/systemd
