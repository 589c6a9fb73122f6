"""What one load of the fleet repo may expand to (reconciler.core.load.expansion)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from reconciler.adapters.repo.diskfiles import DiskRepoFiles, load_repo_at
from reconciler.core.load import cloudconfig, proxyset, repofiles
from reconciler.core.load.expansion import ExpandLimits
from reconciler.core.load.loadmemo import LoadMemo
from reconciler.core.load.yamlload import ValueBudget
from reconciler.errors import InvalidInput, Problem
from tests.test_manifests import write_repo
from tests.test_proxyset import FLEET


def proxy_set(name: str, replicas: int | str, *, cloud_init: str = "") -> str:
    return (
        f"kind: ProxySet\nmetadata: {{name: {name}}}\nspec:\n  replicas: {replicas}\n"
        f"  placement: {{zone: z1, image: deb, machineType: small}}\n{cloud_init}"
    )


def problems(root: Path, expand: ExpandLimits | None = None) -> list[str]:
    with pytest.raises(InvalidInput) as caught:
        load_repo_at(root, expand=expand or ExpandLimits())
    return [str(p) for p in caught.value.problems]


@pytest.fixture
def expanded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The member counts ``proxyset.members`` is asked for, in order."""
    counts: list[int] = []
    real = proxyset.members

    def counting(template: Any, name: str, count: int) -> list[Any]:
        counts.append(count)
        return real(template, name, count)

    monkeypatch.setattr(proxyset, "members", counting)
    return counts


def test_a_proxy_set_with_schema_problems_expands_to_its_template_alone(
    tmp_path: Path, expanded: list[int]
) -> None:
    write_repo(tmp_path, {"fleet.yaml": FLEET, "set.yaml": proxy_set("web", 1001)})

    assert problems(tmp_path) == ["set.yaml:4:13: spec.replicas: must be at most 1000 (got 1001)"]
    assert expanded == [1]


def test_proxies_past_the_limit_are_refused_at_the_replicas_that_cross_it_before_expansion(
    tmp_path: Path, expanded: list[int]
) -> None:
    sets = proxy_set("a", 3) + "---\n" + proxy_set("b", 3) + "---\n" + proxy_set("c", 3)
    write_repo(tmp_path, {"fleet.yaml": FLEET, "sets.yaml": sets})

    found = problems(tmp_path, ExpandLimits(max_proxies=5))

    assert found == [
        "sets.yaml:10:13: spec.replicas: the repo's proxies would exceed the limit of 5 "
        "(ProxySet members counted); this document's and the ones after it were not built"
    ]
    assert expanded == [3]


def test_substituted_user_data_past_the_limit_is_one_problem_at_the_file_field(
    tmp_path: Path,
) -> None:
    files = {
        "fleet.yaml": FLEET,
        "set.yaml": proxy_set("web", 100, cloud_init="  cloudInit: {userDataFile: boot.sh}\n"),
        "boot.sh": "#!/bin/sh\n" + "echo ${proxy.name}\n" * 100,
    }
    write_repo(tmp_path, files)

    found = problems(tmp_path, ExpandLimits(max_user_data_bytes=10_000))

    assert found == [
        "set.yaml:6:29: spec.cloudInit.userDataFile: the proxies' userData, variables "
        "substituted, exceeds the limit of 10000 bytes in total (each ProxySet member holds "
        "its own copy); the proxies from here on were not checked"
    ]
    assert load_repo_at(tmp_path).proxies[99].name == "web-99"  # the default fits it


def test_distinct_cloud_configs_past_the_limit_stop_the_check_with_one_problem(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    checked: list[str] = []
    real = cloudconfig._check_text

    def counting(text: str, budget: ValueBudget | None = None) -> Any:
        checked.append(text)
        return real(text, budget)

    monkeypatch.setattr(cloudconfig, "_check_text", counting)
    user_data = (
        "  cloudInit:\n    userData: |\n      #cloud-config\n      hostname: ${proxy.name}\n"
    )
    write_repo(
        tmp_path, {"fleet.yaml": FLEET, "set.yaml": proxy_set("w", 50, cloud_init=user_data)}
    )

    found = problems(tmp_path, ExpandLimits(max_cloud_config_bytes=10 * 28))

    assert found == [
        "set.yaml:7:15: spec.cloudInit.userData: the distinct cloud-configs of this load "
        "exceed the limit of 280 bytes in total (each ProxySet member whose userData uses "
        "${proxy.name} is its own text); not checked"
    ]
    assert len(checked) == 10


def test_yaml_values_past_the_budget_stop_the_reading_at_the_file_that_crosses_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    read: list[str] = []
    real = DiskRepoFiles.read

    def recording(self: DiskRepoFiles, rel: str) -> bytes | Problem:
        read.append(rel)
        return real(self, rel)

    monkeypatch.setattr(DiskRepoFiles, "read", recording)
    files = {f"m{n}.yaml": "[" + ",".join("1" * 400) + "]\n" for n in range(4)}
    write_repo(tmp_path, {"fleet.yaml": FLEET, **files})

    found = problems(tmp_path, ExpandLimits(max_values=1000))

    assert found[-1] == (
        "m2.yaml:1:286: the manifests hold more than 1000 YAML values in total (the bound "
        "of one load); this file and the ones after it were not read"
    )
    assert read == ["fleet.yaml", "m0.yaml", "m1.yaml", "m2.yaml"]


def test_a_folder_without_fleet_yaml_is_refused_before_any_file_is_walked_or_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(files: DiskRepoFiles) -> list[repofiles.Entry]:
        raise AssertionError(f"walked {files}")

    monkeypatch.setattr(DiskRepoFiles, "walk", refuse)
    write_repo(tmp_path, {"notes/a.yaml": "kind: Proxy\n", "b.yaml": "x: 1\n"})

    assert problems(tmp_path) == [
        "fleet.yaml:0:0: missing: the repo root needs a fleet.yaml with kind: Fleet; "
        "nothing else was read"
    ]


CONFIGS = [
    {"hostname": "web-1", "packages": ["squid"]},
    {"packages": "squid", "runcmd": {"a": 1}, "users": [{"name": 3}]},
    {"apt": {"sources": 5}, "locale": 7, "write_files": [{"content": "x"}]},
    {"unknown_key": 1, "ssh_authorized_keys": "one", "power_state": {"mode": "sleep"}},
    {"autoinstall": {"version": "one"}, "bootcmd": [["a", 1]], "ntp": {"enabled": "yes"}},
    {},
]


@pytest.mark.parametrize("config", CONFIGS)
def test_checking_against_the_modules_naming_its_keys_finds_what_the_whole_schema_finds(
    config: dict[str, Any],
) -> None:
    def described(errors: Any) -> set[tuple[str, str, str]]:
        return {(str(list(e.absolute_path)), str(e.validator), e.message) for e in errors}

    whole = described(cloudconfig._validator().iter_errors(config))

    assert described(cloudconfig._schema_errors(config)) == whole
    assert whole or config in (CONFIGS[0], CONFIGS[-1])


def test_a_cached_cloud_config_charges_the_budget_as_the_first_check_did() -> None:
    text = "#cloud-config\nhostname: a-cached-text\npackages: [squid, curl]\n"
    first, second, memo = ValueBudget(1000), ValueBudget(1000), LoadMemo()

    found = cloudconfig.findings(text, first, memo=memo)
    assert found == cloudconfig.findings(text, second, memo=memo) == ()
    assert first.used == second.used > 0
