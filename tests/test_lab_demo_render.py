"""The demo's rendering of examples/fleet-repo for the lab changes userData only where squid
would refuse the lab's health checks: ``acl NAME src`` lines that do not cover the lab's
management range get it appended; every other byte of every userData stays."""

from __future__ import annotations

import ipaddress
from pathlib import Path

from ruamel.yaml import YAML

from lab.demo import EXAMPLE, LAB_CLIENTS, admit_lab


def example_user_data() -> dict[str, str]:
    found = {}
    for path in sorted(Path(EXAMPLE).rglob("*.yaml")):
        for doc in YAML(typ="safe").load_all(path):
            if isinstance(doc, dict) and doc.get("kind") == "Proxy":
                found[doc["metadata"]["name"]] = doc["spec"]["cloudInit"]["userData"]
    return found


def test_every_example_squid_acl_admits_the_lab_and_nothing_else_changes() -> None:
    examples = example_user_data()
    assert examples
    for name, before in examples.items():
        after = admit_lab(before)
        acls = 0
        for old, new in zip(before.splitlines(), after.splitlines(), strict=True):
            words = old.split()
            if words[:1] == ["acl"] and words[2:3] == ["src"]:
                acls += 1
                nets = [ipaddress.ip_network(n) for n in new.split()[3:]]
                assert any(LAB_CLIENTS.subnet_of(n) for n in nets), (name, new)  # type: ignore[arg-type]
                assert new.startswith(old), (name, old, new)
            else:
                assert new == old, name
        assert acls, name
        assert after.endswith("\n") == before.endswith("\n")


def test_an_acl_that_already_covers_the_lab_is_left_alone() -> None:
    text = "acl lan src 10.0.0.0/8 192.168.0.0/16\n  acl office src 10.20.0.0/16 \n"
    assert admit_lab(text) == (
        "acl lan src 10.0.0.0/8 192.168.0.0/16\n  acl office src 10.20.0.0/16 10.77.0.0/16\n"
    )
