"""Validation that says the one thing wrong: ProxySet's own fields in its hints, and no
derived complaints after a field fleet.yaml left out or a fleet.yaml that does not parse."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_manifests import MINIMAL_FLEET, write_repo

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.errors import InvalidInput

SET = """\
kind: ProxySet
metadata:
  name: web
spec:
  {replicas}: 2
  placement: {{zone: z1, image: deb, machineType: small}}
"""


def problems(root: Path) -> list[str]:
    with pytest.raises(InvalidInput) as err:
        load_repo_at(root)
    return [str(p) for p in err.value.problems]


def test_a_proxysets_unknown_field_lists_replicas_among_the_allowed_ones(tmp_path: Path) -> None:
    repo = write_repo(
        tmp_path, {"fleet.yaml": MINIMAL_FLEET, "set.yaml": SET.format(replicas="size")}
    )
    assert problems(repo) == [
        "set.yaml:4:1: spec.replicas: required field is missing",
        "set.yaml:5:3: spec.size: unknown field; allowed here: cloudInit, health, "
        "installGuestAgent, lifecycle, network, placement, replicas",
    ]


def test_a_misspelt_replicas_is_one_problem_with_a_did_you_mean(tmp_path: Path) -> None:
    repo = write_repo(
        tmp_path, {"fleet.yaml": MINIMAL_FLEET, "set.yaml": SET.format(replicas="replcias")}
    )
    assert problems(repo) == [
        "set.yaml:5:3: spec.replcias: unknown field (did you mean 'replicas'?)"
    ]


def test_a_host_without_its_zone_does_not_make_every_proxy_of_that_zone_unknown(
    tmp_path: Path,
) -> None:
    fleet = MINIMAL_FLEET.replace("      zone: z1\n", "      zon: z1\n")
    proxy = (
        "kind: Proxy\nmetadata:\n  name: p1\nspec:\n"
        "  placement: {zone: z1, host: h1, image: deb, machineType: small}\n"
    )
    repo = write_repo(tmp_path, {"fleet.yaml": fleet, "p1.yaml": proxy})
    found = problems(repo)
    assert all(p.startswith("fleet.yaml:") for p in found), found
    assert any("spec.hosts[0].zon: unknown field (did you mean 'zone'?)" in p for p in found)


def test_a_fleet_yaml_that_does_not_parse_makes_no_proxy_miss_what_its_defaults_give(
    tmp_path: Path,
) -> None:
    proxy = "kind: Proxy\nmetadata:\n  name: p1\nspec:\n  placement: {zone: z1}\n"
    set_ = "kind: ProxySet\nmetadata:\n  name: s\nspec:\n  placement: {zone: z1}\n"
    repo = write_repo(
        tmp_path, {"fleet.yaml": "kind: Fleet\nspec: [\n", "p1.yaml": proxy, "s.yaml": set_}
    )
    found = problems(repo)
    assert [p.split(":")[0] for p in found] == ["fleet.yaml", "s.yaml"], found
    assert found[1] == "s.yaml:4:1: spec.replicas: required field is missing"


def test_a_misspelt_user_data_file_gets_a_did_you_mean_from_its_folder(tmp_path: Path) -> None:
    proxy = (
        "kind: Proxy\nmetadata:\n  name: p1\nspec:\n"
        "  placement: {zone: z1, image: deb, machineType: small}\n"
        "  cloudInit: {userDataFile: cloud-init/squid.cloudconfig}\n"
    )
    repo = write_repo(
        tmp_path,
        {
            "fleet.yaml": MINIMAL_FLEET,
            "p1.yaml": proxy,
            "cloud-init/squid.cloud-config": "#cloud-config\npackages: [squid]\n",
        },
    )
    (found,) = problems(repo)
    assert found.endswith(
        "'cloud-init/squid.cloudconfig' does not exist "
        "(did you mean 'cloud-init/squid.cloud-config'?)"
    ), found


def test_a_cloud_config_vendor_data_is_checked_as_user_data_is(tmp_path: Path) -> None:
    proxy = (
        "kind: Proxy\nmetadata:\n  name: p1\nspec:\n"
        "  placement: {zone: z1, image: deb, machineType: small}\n"
        "  cloudInit:\n    vendorData: |\n      #cloud-config\n      pakages: [htop]\n"
    )
    repo = write_repo(tmp_path, {"fleet.yaml": MINIMAL_FLEET, "p1.yaml": proxy})
    (found,) = problems(repo)
    assert found.startswith(
        "p1.yaml:9:7: spec.cloudInit.vendorData: cloud-config: unknown key 'pakages' "
        "(did you mean 'packages'?)"
    ), found
