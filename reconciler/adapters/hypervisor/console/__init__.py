"""A VM's serial console: the one through the host's libvirt connection (``libvirtconsole``)
and its fake (``fakeconsole``); their seam is reconciler.ports.console."""
