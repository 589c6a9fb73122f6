"""What carries one host's libvirt connection: an ``ssh`` child, or the paramiko link.

``LibvirtSession`` opens libvirt over a local socket that a *carrier* serves.
With ``ssh.libvirtTransport: openssh`` (the default) that is an ``ssh -N -L``
child (``OpenSshForward``), which checks the host key as strictly as the
paramiko link would (the same key and known_hosts file, nothing else), so a dial
that works costs one SSH handshake and loads no paramiko. The paramiko link
(``SshConnection``) is made on first use only: for remote reads and checks, for
the ``paramiko`` transport (``SocketBridge``), and to find out why a child
failed (``after_child_failed``).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from reconciler.adapters.hypervisor.transport.opensshforward import OpenSshForward
from reconciler.errors import TransientError
from reconciler.model import Host
from reconciler.model.settings import SshSettings

if TYPE_CHECKING:  # paramiko loads with the SSH link, when a carrier first needs it
    from reconciler.adapters.hypervisor.transport.ssh import SshConnection
    from reconciler.adapters.hypervisor.transport.sshbridge import SocketBridge


class Carrier:
    """The local socket libvirt-python opens for one host, and the SSH link beside it.
    Not locked itself: ``LibvirtSession`` changes it under its own lock, while a lane's
    dial and a deadline's ``cut`` only read ``bridge`` (one reference) without it."""

    def __init__(self, host: Host, settings: SshSettings) -> None:
        self._host = host
        self._settings = settings
        self._ssh: SshConnection | None = None
        self._link_lock = threading.Lock()
        self.bridge: SocketBridge | OpenSshForward | None = None

    @property
    def via(self) -> str:
        """How the libvirt socket is reached: ``streamlocal`` or ``virt-ssh-helper`` (through
        the SSH link in this process), or ``openssh-streamlocal`` (an ``ssh -L`` child)."""
        if isinstance(self.bridge, OpenSshForward):
            return "openssh-streamlocal"
        return "virt-ssh-helper" if self._refused() else "streamlocal"

    def link(self) -> SshConnection:
        """The paramiko SSH link (dialling on its first use); paramiko loads here."""
        with self._link_lock:
            if self._ssh is None:
                from reconciler.adapters.hypervisor.transport.ssh import SshConnection

                self._ssh = SshConnection(self._host, self._settings)
            return self._ssh

    def alive(self) -> bool:
        """Whether what carries the connection still runs: the child, or the SSH link."""
        bridge = self.bridge
        if isinstance(bridge, OpenSshForward):
            return bridge.alive
        return self._ssh is not None and self._ssh.is_active

    def start(self) -> SocketBridge | OpenSshForward:
        """The bridge to open libvirt through, made when there is none: an ``ssh`` child
        with the openssh transport (unless sshd refused forwarding lately), else the
        paramiko link's bridge."""
        if self.bridge is None:
            if self._settings.libvirt_transport == "openssh" and not self._refused():
                self.bridge = OpenSshForward(self._host, self._settings)
            else:
                self.bridge = self._helper_bridge()
        return self.bridge

    def start_ahead(self) -> None:
        """With the openssh transport and no bridge yet: make the ``ssh`` child's bridge
        and start the child without waiting for it (``OpenSshForward.start``); ``start``
        then hands out that bridge, whose ``prepare`` waits."""
        openssh = self._settings.libvirt_transport == "openssh"
        if self.bridge is None and openssh and not self._refused():
            forward = self.bridge = OpenSshForward(self._host, self._settings)
            forward.start()

    def after_child_failed(self, failed: TransientError) -> SocketBridge:
        """The child failed (and was closed): the paramiko link dials to find and classify
        why, as it always has, and raises that (an unknown or changed host key, a refused
        key, libvirtd's socket missing); when sshd refuses forwarding, the link's bridge
        and its ``virt-ssh-helper`` carry libvirt instead. Otherwise ``failed`` stands."""
        link = self.link()
        link.open_libvirt_channel().close()
        if not link.streamlocal_refused:
            raise failed
        self.bridge = self._helper_bridge()
        return self.bridge

    def close(self) -> None:
        """Close the bridge and the SSH link (the link remembers a refused forwarding)."""
        bridge, self.bridge = self.bridge, None
        try:
            if bridge is not None:
                bridge.close()
        finally:
            if self._ssh is not None:
                self._ssh.close()

    def cut(self) -> None:
        """``close`` for a deadline's abort, on a thread of its own while a call or a dial
        may hold the session's lock: the bridge and the link's transport are taken before
        the bridge closes (which takes a moment), so that a redial starting then keeps
        its fresh link, and the bridge stays for the next call to find dead."""
        bridge = self.bridge
        transport = self._ssh.current if self._ssh is not None else None
        try:
            if bridge is not None:
                bridge.close()
        finally:
            if transport is not None:
                transport.close()

    def _refused(self) -> bool:
        return self._ssh is not None and self._ssh.streamlocal_refused

    def _helper_bridge(self) -> SocketBridge:
        from reconciler.adapters.hypervisor.transport.sshbridge import SocketBridge

        return SocketBridge(self.link().open_libvirt_channel, label=self._host.name)
