"""The SSH link to a stock OpenSSH server negotiates AES-GCM in both directions."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost

pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


def test_the_link_to_openssh_uses_aes_gcm(make_host: Callable[..., LibvirtHost]) -> None:
    adapter = make_host()
    adapter.session.read_host_file("/proc/version")  # a remote read dials the link

    transport = adapter.session._carrier.link().current
    assert transport is not None
    assert transport.local_cipher == "aes128-gcm@openssh.com"
    assert transport.remote_cipher == "aes128-gcm@openssh.com"
