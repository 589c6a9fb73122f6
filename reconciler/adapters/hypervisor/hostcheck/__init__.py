"""``proxyfleet hosts check``: is a hypervisor ready for proxyfleet and how big is it
(``check``), and is KVM usable on it (``kvmprobe``, which boots the probe guest)."""
