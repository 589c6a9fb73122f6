"""Adapters that talk to a hypervisor: SSH, libvirt RPC, the host seam and its fake, base images."""
