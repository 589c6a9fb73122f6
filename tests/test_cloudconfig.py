"""userData that is #cloud-config, checked against cloud-init's own schema on every load."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.core.load import cloudconfig
from reconciler.core.load.loadmemo import LoadMemo
from reconciler.core.load.yamlload import ValueBudget
from reconciler.errors import InvalidInput

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "schemas" / "cloud-init" / "schema-cloud-config-v1.json"

FLEET = """\
kind: Fleet
metadata:
  name: lab
spec:
  images:
    deb:
      url: https://example.org/deb.qcow2
      sha256: abababababababababababababababababababababababababababababababab
  machineTypes:
    small: {vcpus: 1, memoryMiB: 512, diskGiB: 5}
  hosts:
    - {name: h1, address: 10.0.0.1, zone: z1, network: {network: default}}
"""

HEAD = """\
kind: Proxy
metadata:
  name: web-1
spec:
  placement: {zone: z1, image: deb, machineType: small}
  cloudInit:
    userData: |
"""
FIRST = HEAD.count("\n") + 1  # the manifest line of userData's first line


def problems(tmp_path: Path, user_data: str, memo: LoadMemo | None = None) -> list[str]:
    """What loading a one-proxy repo with this userData (as a block scalar) reports."""
    (tmp_path / "fleet.yaml").write_text(FLEET)
    body = "".join(f"      {line}\n" if line else "\n" for line in user_data.splitlines())
    (tmp_path / "web-1.yaml").write_text(HEAD + body)
    (tmp_path / "secrets").mkdir(exist_ok=True)
    (tmp_path / "secrets" / "pw.age").write_bytes(b"age file stand-in; never decrypted here")
    try:
        load_repo_at(tmp_path, memo=memo)
    except InvalidInput as exc:
        return [str(p) for p in exc.problems]
    return []


def at(offset: int, column: int, message: str) -> str:
    """A problem on userData line ``offset + 1``."""
    return f"web-1.yaml:{FIRST + offset}:{column}: spec.cloudInit.userData: {message}"


def test_a_misspelt_key_is_reported_at_its_manifest_line_with_the_key_it_likely_meant(
    tmp_path: Path,
) -> None:
    found = problems(tmp_path, "#cloud-config\npackages: [squid]\npackage_upgarde: true\n")
    assert found == [
        at(
            2,
            7,
            "cloud-config: unknown key 'package_upgarde' (did you mean 'package_upgrade'?); "
            "cloud-init 22.4.2 would ignore it",
        )
    ]


def test_a_wrong_type_deep_in_a_list_points_at_that_entry_and_never_shows_the_value(
    tmp_path: Path,
) -> None:
    user_data = (
        "#cloud-config\n"
        "users:\n"
        "  - name: ops\n"
        "    lock_passwd: hunter2-not-a-boolean\n"
        "write_files:\n"
        "  - path: /etc/x\n"
        "    permissions: 420\n"
    )
    found = problems(tmp_path, user_data)
    assert found == [
        at(3, 11, "cloud-config: users[0].lock_passwd: expected a boolean, got a string"),
        at(6, 11, "cloud-config: write_files[0].permissions: expected a string, got a number"),
    ]
    assert not any("hunter2" in line for line in found)


def test_a_value_of_several_allowed_types_names_them_all(tmp_path: Path) -> None:
    found = problems(tmp_path, "#cloud-config\nbootcmd:\n  - {echo: hi}\n")
    assert found == [
        at(2, 9, "cloud-config: bootcmd[0]: expected a list or a string, got a mapping")
    ]


def test_yaml_1_1_booleans_are_read_as_cloud_init_reads_them(tmp_path: Path) -> None:
    assert problems(tmp_path, "#cloud-config\npackage_update: yes\nssh_pwauth: off\n") == []


def test_broken_yaml_inside_user_data_is_reported_in_manifest_lines(tmp_path: Path) -> None:
    found = problems(tmp_path, "#cloud-config\npackages: [squid]\npackages: [curl]\n")
    assert found == [
        at(
            2,
            7,
            f"cloud-config is not valid YAML: duplicate key 'packages' (first at line {FIRST + 1})",
        )
    ]


def test_user_data_that_is_not_cloud_config_is_not_checked(tmp_path: Path) -> None:
    assert problems(tmp_path, "#!/bin/sh\npackages: [not, yaml, here\n") == []
    assert problems(tmp_path, "## template: jinja\n#cloud-config\nfoo: 1\n") == []


def test_the_check_sees_placeholders_never_secret_values(tmp_path: Path) -> None:
    # Substituted as text, a value could break the YAML or fail a type; the placeholder
    # does neither, and the file stand-in is not even decryptable: nothing was read.
    user_data = (
        "#cloud-config\nchpasswd:\n  list: |\n    root:${secret:pw}\nhostname: ${secret:pw}\n"
    )
    assert problems(tmp_path, user_data) == []


def test_a_one_line_user_data_is_reported_at_its_value(tmp_path: Path) -> None:
    (tmp_path / "fleet.yaml").write_text(FLEET)
    (tmp_path / "web-1.yaml").write_text(
        HEAD.replace("userData: |\n", 'userData: "#cloud-config\\npackges: [squid]\\n"\n')
    )
    with pytest.raises(InvalidInput) as exc:
        load_repo_at(tmp_path)
    (problem,) = exc.value.problems
    assert (problem.line, problem.column) == (FIRST - 1, 15)
    assert "unknown key 'packges' (did you mean 'packages'?)" in problem.message


def test_the_shipped_schema_is_cloud_init_22_4_2s_unchanged() -> None:
    readme = (SCHEMA.parent / "README.md").read_text()
    digest = hashlib.sha256(SCHEMA.read_bytes()).hexdigest()
    assert f"sha256 `{digest}`" in readme
    assert f"version\n**{cloudconfig.CLOUD_INIT_VERSION}-1+deb12u4**" in readme
    assert "Apache-2.0" in readme
    assert json.loads(SCHEMA.read_text())["$schema"] == "http://json-schema.org/draft-04/schema#"


def test_the_example_repo_and_the_labs_squid_user_data_pass(tmp_path: Path) -> None:
    load_repo_at(ROOT / "examples" / "fleet-repo")
    import sys

    sys.path.insert(0, str(ROOT / "tests" / "lab"))
    from labutil import squid_user_data

    assert problems(tmp_path, squid_user_data("p1")) == []


def test_each_distinct_cloud_config_is_checked_once_however_often_it_is_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    real = cloudconfig._check_text

    def counting(text: str, budget: ValueBudget | None = None) -> Iterator[tuple[int, str]]:
        calls.append(text)
        return real(text, budget)

    monkeypatch.setattr(cloudconfig, "_check_text", counting)
    user_data, memo = "#cloud-config\npackges: [squid]\n", LoadMemo()
    first = problems(tmp_path, user_data, memo)
    assert problems(tmp_path, user_data, memo) == first and len(first) == 1
    assert len(calls) == 1
    assert problems(tmp_path, user_data) == first and len(calls) == 2  # no memo: checked again


def test_an_unknown_key_that_is_not_a_plain_word_is_reported_without_its_text(
    tmp_path: Path,
) -> None:
    found = problems(
        tmp_path,
        "#cloud-config\n'Hunter2-SECRET token=abc': 1\nusers:\n  - name: a\n    'x y z': 2\n",
    )
    assert found, "both unknown keys are problems"
    assert not any("Hunter2" in p or "x y z" in p for p in found), found
    assert any("(a key that is not a plain word, not shown)" in p for p in found), found
