"""fleet.yaml's spec.proxyDefaults: filled in where a proxy is silent, its own value winning."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.core.load.proxydefaults import merge
from reconciler.core.load.schemacheck import SCHEMA_FILES, schema, validator
from reconciler.core.load.yamlload import FieldPath
from reconciler.errors import InvalidInput
from reconciler.model import Proxy
from tests.test_manifests import MINIMAL_FLEET, write_repo

DEFAULTS = """\
  proxyDefaults:
    placement: {zone: z1, image: deb, machineType: small}
    installGuestAgent: false
    health: {proxyPort: 8080, timeoutSeconds: 15}
    lifecycle: {protect: true}
    cloudInit:
      userData: |
        #cloud-config
        hostname: ${proxy.name}
      vendorData: |
        #cloud-config
        timezone: UTC
"""
FLEET = MINIMAL_FLEET + DEFAULTS
ROOT = Path(__file__).resolve().parent.parent


def load_one(tmp_path: Path, spec: str) -> Proxy:
    proxy = f"kind: Proxy\nmetadata:\n  name: p1\nspec:\n{spec}"
    write_repo(tmp_path, {"fleet.yaml": FLEET, "p1.yaml": proxy})
    return load_repo_at(tmp_path).proxies[0]


def test_a_proxy_that_says_nothing_takes_every_default(tmp_path: Path) -> None:
    proxy = load_one(tmp_path, "  {}\n")

    assert proxy.placement.zone == "z1" and proxy.placement.machine_type == "small"
    assert proxy.install_guest_agent is False
    assert proxy.health.proxy_port == 8080
    assert proxy.lifecycle.protect is True
    assert proxy.cloud_init.user_data == "#cloud-config\nhostname: p1\n"


def test_a_proxy_without_a_spec_is_made_of_the_defaults_alone(tmp_path: Path) -> None:
    write_repo(tmp_path, {"fleet.yaml": FLEET, "p1.yaml": "kind: Proxy\nmetadata: {name: p1}\n"})

    (proxy,) = load_repo_at(tmp_path).proxies

    assert proxy.placement.image == "deb" and proxy.health.proxy_port == 8080


def test_nested_mappings_merge_key_by_key_and_the_proxys_own_value_wins(tmp_path: Path) -> None:
    proxy = load_one(tmp_path, "  placement: {image: deb}\n  health: {proxyPort: 3128}\n")

    assert proxy.health.proxy_port == 3128
    assert proxy.health.timeout_seconds == 15
    assert proxy.placement.zone == "z1"


def test_a_proxys_user_data_file_replaces_the_default_user_data_not_the_vendor_data(
    tmp_path: Path,
) -> None:
    (tmp_path / "own.cloud-config").write_text("#cloud-config\nhostname: own\n")

    proxy = load_one(tmp_path, "  cloudInit: {userDataFile: own.cloud-config}\n")

    cloud = proxy.cloud_init
    assert cloud.user_data == "#cloud-config\nhostname: own\n"
    assert cloud.vendor_data == "#cloud-config\ntimezone: UTC\n"


def test_merge_takes_non_mapping_values_whole_and_records_what_it_filled() -> None:
    filled: set[FieldPath] = set()
    merged = merge(
        {"health": {"proxyPort": 1, "probeURL": "http://a/"}, "installGuestAgent": False},
        {"health": {"proxyPort": 2}, "cloudInit": {"userDataFile": "f"}},
        ("spec",),
        filled,
    )

    assert merged == {
        "health": {"proxyPort": 2, "probeURL": "http://a/"},
        "cloudInit": {"userDataFile": "f"},
        "installGuestAgent": False,
    }
    assert filled == {("spec", "health", "probeURL"), ("spec", "installGuestAgent")}


def test_a_problem_in_inherited_user_data_points_into_fleet_yaml(tmp_path: Path) -> None:
    fleet = FLEET.replace("hostname: ${proxy.name}", "hostname: ${proxy.nmae}")
    write_repo(
        tmp_path, {"fleet.yaml": fleet, "p1.yaml": "kind: Proxy\nmetadata: {name: p1}\nspec: {}\n"}
    )

    with pytest.raises(InvalidInput) as caught:
        load_repo_at(tmp_path)

    (problem,) = caught.value.problems
    assert (problem.file, problem.line, problem.column) == ("fleet.yaml", 24, 19)
    assert problem.field == "spec.proxyDefaults.cloudInit.userData"
    assert problem.message.startswith("unknown ${proxy.*} variable (did you mean")


@pytest.mark.parametrize("kind", sorted(SCHEMA_FILES))
def test_each_manifest_schema_is_valid_and_shipped_in_the_package(kind: str) -> None:
    shipped = resources.files("reconciler").joinpath("schemas", SCHEMA_FILES[kind])
    in_repo = ROOT / "schemas" / SCHEMA_FILES[kind]

    Draft202012Validator.check_schema(schema(kind))
    assert json.loads(shipped.read_text("utf-8")) == json.loads(in_repo.read_text())


def test_fleet_yamls_proxy_defaults_are_checked_by_the_proxys_own_field_rules() -> None:
    errors = validator("Fleet").iter_errors(
        {
            "kind": "Fleet",
            "metadata": {"name": "x"},
            "spec": {"proxyDefaults": {"health": {"proxyPort": 0}, "placement": {"host": "h"}}},
        }
    )

    assert sorted(e.validator for e in errors) == ["additionalProperties", "minimum"]
