"""The host's ARP table, read as text when libvirt's own reader fails."""

from __future__ import annotations

from reconciler.adapters.hypervisor.observe.neighbours import arp_entries, arp_ipv4

TABLE = """\
IP address       HW type     Flags       HW address            Mask     Device
10.78.21.191     0x1         0x2         52:54:00:74:87:74     *        br0
10.78.21.5       0x1         0x0         52:54:00:aa:bb:cc     *        br0
10.78.21.7       0x1         0x2         52:54:00:AA:BB:DD     *        br0
169.254.1.1      0x1         0x2         52:54:00:74:87:74     *        br0
10.78.21.191     0x1         0x2         52:54:00:74:87:74     *        br1
garbage
"""


def test_complete_entries_of_the_domains_macs_give_its_addresses_once() -> None:
    assert arp_ipv4(TABLE, ["52:54:00:74:87:74"]) == ("10.78.21.191",)


def test_an_incomplete_entry_is_not_an_address() -> None:
    assert arp_ipv4(TABLE, ["52:54:00:aa:bb:cc"]) == ()


def test_macs_match_whatever_their_case() -> None:
    assert arp_ipv4(TABLE, ["52:54:00:aa:bb:dd"]) == ("10.78.21.7",)


def test_other_macs_and_a_table_without_entries_give_nothing() -> None:
    assert arp_ipv4(TABLE, ["52:54:00:00:00:01"]) == ()
    assert arp_ipv4(TABLE.splitlines()[0], ["52:54:00:74:87:74"]) == ()


def test_the_lines_a_log_quotes_are_those_of_the_macs_incomplete_ones_included() -> None:
    assert arp_entries(TABLE, ["52:54:00:AA:BB:CC"]) == (
        "10.78.21.5 0x1 0x0 52:54:00:aa:bb:cc * br0",
    )
    assert arp_entries(TABLE, ["52:54:00:00:00:01"]) == ()
