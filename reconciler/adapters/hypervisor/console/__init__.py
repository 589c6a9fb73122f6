"""A VM's serial console: the seam (``stream``), its fake (``fakeconsole``) and the one
through the host's libvirt connection (``libvirtconsole``)."""
