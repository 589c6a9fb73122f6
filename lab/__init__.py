"""The proxyfleet lab: namespaced libvirt hypervisors and a guest image on one machine.

See docs/lab.md. Run as root: ``python -m lab up|down|status|image``.
"""
