"""The SSH link prefers AES-GCM: one call per packet instead of a cipher and a separate HMAC."""

from __future__ import annotations

import paramiko

from reconciler.adapters.hypervisor.transport.ssh import preferred_ciphers


def test_aes_gcm_comes_first_and_every_other_cipher_paramiko_offers_stays_in_its_order() -> None:
    available = tuple(paramiko.Transport._preferred_ciphers)

    ordered = preferred_ciphers(available)

    assert ordered[:2] == ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com")
    assert sorted(ordered) == sorted(available)
    rest = [c for c in available if not c.endswith("-gcm@openssh.com")]
    assert list(ordered[2:]) == rest


def test_a_paramiko_without_gcm_keeps_its_own_order() -> None:
    available = ("aes128-ctr", "aes256-ctr")

    assert preferred_ciphers(available) == available
