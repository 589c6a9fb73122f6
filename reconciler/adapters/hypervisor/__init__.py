"""Adapters that talk to a hypervisor: the host seam (``host``), its fake (``fakehost``) and
its libvirt adapter (``libvirthost``), over five rooms, each one concept:

- ``transport``: the SSH link and the libvirt connection over it (deadlines, lanes, errors
  classified, domain events);
- ``images``: the daemon's image cache, and base images and volumes in a host's pool;
- ``observe``: what a host holds and where its guests answer;
- ``console``: a VM's serial console;
- ``hostcheck``: ``proxyfleet hosts check``, KVM probe included.

The rooms import each other only through named modules (pyproject.toml's import contracts).
"""
