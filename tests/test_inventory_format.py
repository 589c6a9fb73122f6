"""The inventory JSON format: round trip, and problems that name the file and the field."""

from __future__ import annotations

import dataclasses
import json
from importlib import resources
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from reconciler.core.load.inventory import dump_inventory, load_inventory, parse_inventory
from reconciler.errors import InvalidInput
from reconciler.model import Domain, DomainState, HostInventory, Inventory, Owner
from reconciler.model.inventory import BaseSize, Capacity

ROOT = Path(__file__).resolve().parent.parent

INVENTORY = Inventory(
    hosts=(
        HostInventory(
            name="kvm01",
            reachable=True,
            capacity=Capacity(
                cpus=8, memory_mib=32768, pool_capacity_bytes=2**40, pool_available_bytes=2**39
            ),
            domains=(
                Domain(
                    name="pf-home-web-1-0123abcd",
                    state=DomainState.RUNNING,
                    owner=Owner(fleet="home", proxy="web-1", digest="0123abcd" * 8),
                    vcpus=2,
                    memory_mib=1024,
                ),
                Domain(
                    name="pf-home-vault-89abcdef",
                    state=DomainState.SHUTOFF,
                    reason="crashed",
                    owner=Owner(
                        fleet="home",
                        proxy="vault",
                        digest="89abcdef" * 8,
                        image_key="debian",
                        image_sha256="ab" * 32,
                        revision="c0ffee",
                        created="2026-11-30T12:00:00+00:00",
                        protect=True,
                        image_base="base-debian-abababababab.qcow2",
                    ),
                ),
                Domain(name="windows11", state=DomainState.PAUSED, owner=None),
            ),
        ),
        HostInventory(name="kvm02", reachable=False, error="ssh: connection refused"),
    )
)


def test_an_inventory_survives_a_round_trip_through_json() -> None:
    assert parse_inventory(dump_inventory(INVENTORY), file="inv.json") == INVENTORY


def test_the_json_has_the_documented_shape() -> None:
    document = json.loads(dump_inventory(INVENTORY))
    kvm01, kvm02 = document["hosts"]
    assert kvm01["domains"][0] == {
        "name": "pf-home-web-1-0123abcd",
        "state": "running",
        "owner": {"fleet": "home", "proxy": "web-1", "digest": "0123abcd" * 8},
        "vcpus": 2,
        "memoryMiB": 1024,
    }
    assert kvm01["domains"][1]["owner"]["protect"] is True
    assert kvm01["domains"][1]["reason"] == "crashed"
    assert kvm01["domains"][2]["owner"] is None
    assert kvm02 == {"name": "kvm02", "reachable": False, "error": "ssh: connection refused"}
    assert kvm01["capacity"] == {
        "cpus": 8,
        "memoryMiB": 32768,
        "poolCapacityBytes": 2**40,
        "poolAvailableBytes": 2**39,
    }


def test_the_issue_example_parses() -> None:
    text = """{"hosts": [{"name": "kvm01", "reachable": true, "domains": [
        {"name": "pf-home-web-1-aaaaaaaa", "state": "running",
         "owner": {"fleet": "home", "proxy": "web-1", "digest": "aa"}}]},
        {"name": "kvm02", "reachable": false, "error": "timeout"}]}"""
    inventory = parse_inventory(text, file="x.json")
    assert [h.name for h in inventory.hosts] == ["kvm01", "kvm02"]
    kvm01 = inventory.host("kvm01")
    assert kvm01 is not None
    assert kvm01.domains[0].owner == Owner(fleet="home", proxy="web-1", digest="aa")


def _problems(text: str) -> list[str]:
    with pytest.raises(InvalidInput) as caught:
        parse_inventory(text, file="inv.json")
    assert all(p.file == "inv.json" for p in caught.value.problems)
    return [f"{p.field}: {p.message}" for p in caught.value.problems]


def test_every_problem_is_reported_with_its_field() -> None:
    text = json.dumps(
        {
            "hosts": [
                {
                    "name": "kvm01",
                    "reachable": True,
                    "error": 5,
                    "domains": [
                        {"name": "a", "state": "sleeping", "owner": None},
                        {"state": "running", "owner": {"fleet": "home", "proxy": "p"}},
                    ],
                },
                {"name": "kvm01", "reachable": False, "domains": [], "color": "red"},
            ]
        }
    )
    assert _problems(text) == [
        "hosts[0].error: must be a string (got an integer (5))",
        "hosts[0].domains[0].state: must be one of running, shutoff, paused, crashed, other "
        "(got 'sleeping')",
        "hosts[0].domains[1].name: required field is missing",
        "hosts[0].domains[1].owner.digest: required field is missing",
        "hosts[1].color: unknown field; allowed here: capacity, domains, error, name, "
        "reachable, volumes",
        "hosts[1].name: host 'kvm01' is listed twice",
    ]


def test_reachable_must_be_a_boolean() -> None:
    text = json.dumps({"hosts": [{"name": "k", "reachable": "yes"}]})
    assert _problems(text) == ["hosts[0].reachable: must be true or false (got a string ('yes'))"]


def test_an_unreachable_host_cannot_list_domains() -> None:
    text = '{"hosts": [{"name": "k", "reachable": false, "domains": [{"name": "a", "state": "running", "owner": null}]}]}'  # noqa: E501
    assert _problems(text) == ["hosts[0].domains: an unreachable host cannot list domains"]


def test_a_domain_listed_twice_on_one_host_is_a_problem() -> None:
    domain = {"name": "a", "state": "running", "owner": None}
    text = json.dumps({"hosts": [{"name": "k", "reachable": True, "domains": [domain, domain]}]})
    assert _problems(text) == ["hosts[0].domains[1].name: domain 'a' is listed twice"]


def test_broken_json_names_line_and_column() -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_inventory('{"hosts": [\n  {"name": }]}', file="inv.json")
    (problem,) = caught.value.problems
    assert (problem.file, problem.line, problem.column) == ("inv.json", 2, 12)
    assert problem.message.startswith("not JSON")


def test_a_document_without_hosts_is_a_problem() -> None:
    assert _problems("[]") == [": must be an object with a 'hosts' list (got a list)"]
    assert _problems("{}") == ["hosts: required field is missing"]


def test_a_missing_file_is_invalid_input_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        load_inventory(tmp_path / "nope.json")
    assert caught.value.problems[0].file.endswith("nope.json")


def test_base_sizes_survive_a_round_trip_and_are_written_by_volume_name() -> None:
    sized = dataclasses.replace(
        INVENTORY,
        base_sizes=(
            BaseSize("base-debian-abababababab.qcow2", 361758720),
            BaseSize("base-alpine.raw", 0),
        ),
    )
    text = dump_inventory(sized)
    assert json.loads(text)["baseSizes"] == {
        "base-debian-abababababab.qcow2": 361758720,
        "base-alpine.raw": 0,
    }
    parsed = parse_inventory(text, file="inv.json")
    assert parsed.base_size("base-debian-abababababab.qcow2") == 361758720
    assert parsed.base_size("base-alpine.raw") == 0
    assert parsed.base_size("base-other.qcow2") is None
    assert parsed.hosts == INVENTORY.hosts


def test_a_problem_names_the_line_and_column_of_its_value() -> None:
    text = (
        '{"hosts": [\n'
        '  {"name": "kvm01", "reachable": true,\n'
        '   "capacity": {"cpus": 2.5, "memoryMiB": 1024,\n'
        '                "poolCapacityBytes": 1, "poolAvailableBytes": -1}}],\n'
        ' "baseSizes": {"debian.qcow2": 5, "base-debian.qcow2": "big"}}\n'
    )
    with pytest.raises(InvalidInput) as caught:
        parse_inventory(text, file="inv.json")
    assert [str(p) for p in caught.value.problems] == [
        "inv.json:3:25: hosts[0].capacity.cpus: must be a whole number, 0 or more "
        "(got a number (2.5))",
        "inv.json:4:63: hosts[0].capacity.poolAvailableBytes: must be at least 0 (got -1)",
        "inv.json:5:16: baseSizes.debian.qcow2: invalid name: must be a base volume name "
        "(base-<image>[-<sha256 prefix>].qcow2 or .raw)",
        "inv.json:5:56: baseSizes.base-debian.qcow2: must be a whole number, 0 or more "
        "(got a string ('big'))",
    ]


def test_the_inventory_schema_ships_with_the_package_and_validates_the_documented_shape() -> None:
    schema = json.loads((ROOT / "schemas" / "inventory.schema.json").read_text())
    packaged = resources.files("reconciler").joinpath("schemas", "inventory.schema.json")
    assert json.loads(packaged.read_text("utf-8")) == schema
    Draft202012Validator.check_schema(schema)
    Draft202012Validator(schema).validate(json.loads(dump_inventory(INVENTORY)))
