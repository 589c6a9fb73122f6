"""The NoCloud seed ISO (label ``cidata``), built entirely in memory.

The seed's writer staged files in a temp directory and failed under a
read-only root filesystem ("creating iso writer: read-only file system");
pycdlib writes from and to in-memory buffers here, so building a seed opens no
file at all (a test holds that with an audit hook).

``user-data`` is the manifest's string encoded as UTF-8 with the values of its
``${secret:NAME}`` references in place, nothing more: never parsed, merged or
re-rendered. Those references are exactly the ones the userData as written
holds: a ``${proxy.*}`` value that would make or change one is refused at load
(reconciler.core.load.variables), so no label can spell a reference here.
The seed is the one place a secret's value is written: it lands,
in clear, in the seed volume on the hypervisor (docs/security.md). What goes
into ``vendor-data`` is decided in reconciler.core.render.guestagent; a fixed-address
proxy's ``network-config`` in reconciler.core.render.netconfig.

pycdlib stamps the build time into the volume descriptors, so two builds of
the same spec differ in a few bytes; the files inside are identical.
"""

from __future__ import annotations

import io
import json

import pycdlib

from reconciler.core.render.guestagent import vendor_data
from reconciler.core.render.netconfig import network_config
from reconciler.model.vm import VmSpec

VOLUME_LABEL = "cidata"

# (Joliet / Rock Ridge name, ISO 9660 level-4 name). Linux mounts the seed
# with Rock Ridge and cloud-init reads the long names; the 9660 names only
# have to be unique.
_NAMES = {
    "meta-data": "/META-DATA.;1",
    "user-data": "/USER-DATA.;1",
    "vendor-data": "/VENDOR-DATA.;1",
    "network-config": "/NETWORK-CONFIG.;1",
}


def seed_files(spec: VmSpec) -> dict[str, bytes]:
    """The files of the seed by name, in the order they are written."""
    files = {
        "meta-data": meta_data(instance_id=spec.domain, hostname=spec.proxy),
        "user-data": spec.cloud_init.rendered_user_data().encode("utf-8"),
    }
    vendor = vendor_data(
        install_guest_agent=spec.install_guest_agent,
        user_vendor_data=spec.cloud_init.vendor_data,
    )
    if vendor is not None:
        files["vendor-data"] = vendor
    if spec.network is not None and spec.mac is not None:
        # The load refuses a networkConfig beside spec.network: this one is the only one.
        files["network-config"] = network_config(spec.network, mac=spec.mac)
    elif spec.cloud_init.network_config is not None:
        files["network-config"] = spec.cloud_init.network_config.encode("utf-8")
    return files


def meta_data(*, instance_id: str, hostname: str) -> bytes:
    """NoCloud meta-data. JSON is valid YAML and needs no quoting rules of its own."""
    document = {"instance-id": instance_id, "local-hostname": hostname}
    return (json.dumps(document, indent=2) + "\n").encode("utf-8")


def seed_iso(spec: VmSpec) -> bytes:
    """The ISO image as bytes: ISO 9660 level 4 + Joliet 3 + Rock Ridge 1.09."""
    return build_iso(seed_files(spec))


def build_iso(files: dict[str, bytes]) -> bytes:
    iso = pycdlib.PyCdlib()
    iso.new(
        interchange_level=4,
        vol_ident=VOLUME_LABEL,
        joliet=3,
        rock_ridge="1.09",
    )
    try:
        for name, data in files.items():
            iso.add_fp(
                io.BytesIO(data),
                len(data),
                iso_path=_NAMES[name],
                rr_name=name,
                joliet_path=f"/{name}",
            )
        out = io.BytesIO()
        iso.write_fp(out)
    finally:
        iso.close()
    return out.getvalue()
