"""Frozen values shared by every layer: the fleet, proxies, inventory, plans.

Nothing here does I/O; everything here is immutable and cheap to compare.
"""

from reconciler.model.fleet import (
    CloudInit,
    DomainType,
    DriftMode,
    Firmware,
    Fleet,
    HealthCheck,
    Host,
    HostNetwork,
    HostState,
    Image,
    ImageFormat,
    Lifecycle,
    Location,
    MachineType,
    Placement,
    Policy,
    Proxy,
    Repo,
)
from reconciler.model.inventory import Domain, DomainState, HostInventory, Inventory, Owner
from reconciler.model.plan import Action, ActionKind, DomainRef, Plan

__all__ = [
    "Action",
    "ActionKind",
    "CloudInit",
    "Domain",
    "DomainRef",
    "DomainState",
    "DomainType",
    "DriftMode",
    "Firmware",
    "Fleet",
    "HealthCheck",
    "Host",
    "HostInventory",
    "HostNetwork",
    "HostState",
    "Image",
    "ImageFormat",
    "Inventory",
    "Lifecycle",
    "Location",
    "MachineType",
    "Owner",
    "Placement",
    "Plan",
    "Policy",
    "Proxy",
    "Repo",
]
