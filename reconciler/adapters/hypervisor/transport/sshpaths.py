"""What an SSH link to a host is called and where its local socket lives, without paramiko.

The ``openssh`` transport (``opensshforward``) dials with the system's ``ssh``
and loads no SSH library unless that child fails (``LibvirtSession``), so what
it shares with the paramiko link lives here: the name OpenSSH writes into
known_hosts, and the private directory of a local libvirt socket.
"""

from __future__ import annotations

import os
import tempfile

from reconciler.errors import PermanentError


def known_hosts_name(address: str, port: int) -> str:
    """The name OpenSSH writes into known_hosts: ``addr`` on 22, else ``[addr]:port``."""
    return address if port == 22 else f"[{address}]:{port}"


def private_socket_dir(label: str) -> tuple[str, str]:
    """A fresh 0700 directory for a local libvirt socket and the socket's path in it: under
    systemd's ``$RUNTIME_DIRECTORY`` when set, else the temp dir. PermanentError naming
    the place when none can be made."""
    base = os.environ.get("RUNTIME_DIRECTORY", "").split(":")[0] or tempfile.gettempdir()
    try:
        directory = tempfile.mkdtemp(prefix="proxyfleet-", dir=base)
        os.chmod(directory, 0o700)
    except OSError as exc:
        raise PermanentError(
            f"cannot make the local libvirt socket under {base}: {exc}; "
            "give proxyfleet a writable RuntimeDirectory or /tmp",
            host=label,
        ) from exc
    return directory, os.path.join(directory, "libvirt-sock")
