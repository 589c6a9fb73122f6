"""proxyfleet: keep HTTP-proxy VMs on libvirt hosts exactly as a git repo says."""

__version__ = "0.1.0"
