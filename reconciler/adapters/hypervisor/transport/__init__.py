"""How proxyfleet reaches a host's libvirt: the SSH link (paramiko, or the system's OpenSSH
client), the libvirt connection carried over it (dialled, deadlined, its errors classified),
extra lanes for parallel calls, and the domain events on it (``ownerwatch``).

Other rooms use ``libvirtrpc``, ``libvirterrors``, ``deadline`` and ``ownerwatch`` only.
"""
