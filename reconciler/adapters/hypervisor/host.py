"""Where the hypervisor seam was: it is reconciler.ports.hypervisor now. Kept as a name
only while branches that import it from here land; import it from the ports."""

from reconciler.ports.hypervisor import Hypervisor as Hypervisor

__all__ = ["Hypervisor"]
