"""kind: ProxySet: replicas proxies from one template, indistinguishable from Proxy documents."""

from __future__ import annotations

from pathlib import Path

import pytest
from planworld import build_inventory

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.core.plan.digest import proxy_digest
from reconciler.core.plan.planner import plan
from reconciler.errors import InvalidInput
from reconciler.model import ActionKind, Repo
from tests.test_manifests import write_repo

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
    - {name: h2, address: 10.0.0.2, zone: z1, network: {network: default}}
  policy: {prune: true}
"""

PROXY_FORM = "".join(
    f"""\
---
kind: Proxy
metadata:
  name: web-{n}
  labels: {{team: infra}}
spec:
  placement: {{zone: z1, image: deb, machineType: small}}
  cloudInit:
    userData: |
      #cloud-config
      hostname: web-{n}
      write_files:
        - {{path: /etc/team, content: infra}}
  health: {{timeoutSeconds: 15}}
"""
    for n in range(3)
)

SET_FORM_DEFAULTS = """\
  proxyDefaults:
    placement: {zone: z1, image: deb, machineType: small}
    cloudInit: {userDataFile: cloud-init/squid.cloud-config}
    health: {timeoutSeconds: 15}
"""

SHARED_FILE = """\
#cloud-config
hostname: ${proxy.name}
write_files:
  - {path: /etc/team, content: ${proxy.labels.team}}
"""


def proxyset(replicas: int, spec: str = "") -> str:
    return (
        "kind: ProxySet\nmetadata:\n  name: web\n  labels: {team: infra}\n"
        f"spec:\n  replicas: {replicas}\n{spec}"
    )


def set_form(tmp_path: Path, replicas: int = 3) -> Repo:
    write_repo(
        tmp_path,
        {
            "fleet.yaml": FLEET + SET_FORM_DEFAULTS,
            "cloud-init/squid.cloud-config": SHARED_FILE,
            "proxies/web.yaml": proxyset(replicas),
        },
    )
    return load_repo_at(tmp_path)


def test_a_proxyset_of_three_loads_as_proxies_named_set_0_to_set_2(tmp_path: Path) -> None:
    repo = set_form(tmp_path)

    assert [p.name for p in repo.proxies] == ["web-0", "web-1", "web-2"]
    assert [p.cloud_init.user_data.splitlines()[1] for p in repo.proxies] == [
        "hostname: web-0",
        "hostname: web-1",
        "hostname: web-2",
    ]
    assert all(p.labels == (("team", "infra"),) for p in repo.proxies)


def test_rewriting_proxies_as_a_proxyset_with_shared_file_and_defaults_changes_no_digest(
    tmp_path: Path,
) -> None:
    proxies = load_repo_at(write_repo(tmp_path / "a", {"fleet.yaml": FLEET, "p.yaml": PROXY_FORM}))
    sets = set_form(tmp_path / "b")

    assert sets.proxies == proxies.proxies
    for before, after in zip(proxies.proxies, sets.proxies, strict=True):
        for host in proxies.fleet.hosts:
            resolved = {
                "image": proxies.fleet.images[0],
                "machine_type": proxies.fleet.machine_types[0],
            }
            assert proxy_digest(before, host, **resolved) == proxy_digest(after, host, **resolved)


def test_converting_a_running_fleet_from_proxies_to_a_proxyset_plans_no_change(
    tmp_path: Path,
) -> None:
    proxies = load_repo_at(write_repo(tmp_path / "a", {"fleet.yaml": FLEET, "p.yaml": PROXY_FORM}))
    running = build_inventory(
        proxies, {"h1": [{"proxy": "web-0"}, {"proxy": "web-2"}], "h2": [{"proxy": "web-1"}]}
    )

    result = plan(set_form(tmp_path / "b"), running)

    assert {a.kind for a in result.actions} == {ActionKind.KEEP}
    assert len(result.actions) == 3


def test_scaling_a_proxyset_down_deletes_its_highest_ordinals(tmp_path: Path) -> None:
    four = set_form(tmp_path / "four", replicas=4)
    running = build_inventory(
        four,
        {
            "h1": [{"proxy": "web-0"}, {"proxy": "web-2"}],
            "h2": [{"proxy": "web-1"}, {"proxy": "web-3"}],
        },
    )

    result = plan(set_form(tmp_path / "two", replicas=2), running)

    kept = sorted(a.proxy for a in result.actions if a.kind is ActionKind.KEEP)
    deleted = sorted(a.proxy for a in result.actions if a.kind is ActionKind.DELETE)
    assert (kept, deleted) == (["web-0", "web-1"], ["web-2", "web-3"])


def test_replicas_zero_asks_for_no_proxy_but_still_checks_the_template(tmp_path: Path) -> None:
    write_repo(
        tmp_path,
        {
            "fleet.yaml": FLEET,
            "web.yaml": proxyset(0, "  placement: {zone: z1, image: deb, machineType: smal}\n"),
        },
    )

    with pytest.raises(InvalidInput) as caught:
        load_repo_at(tmp_path)

    assert [p.field for p in caught.value.problems] == ["spec.placement.machineType"]


def test_a_sets_annotations_reach_every_member_so_restarted_at_rolls_them_all(
    tmp_path: Path,
) -> None:
    annotated = proxyset(2).replace(
        "  labels: {team: infra}\n",
        "  labels: {team: infra}\n  annotations: {proxyfleet.io/restartedAt: '2026-12-01'}\n",
    )
    write_repo(
        tmp_path,
        {
            "fleet.yaml": FLEET + SET_FORM_DEFAULTS,
            "cloud-init/squid.cloud-config": SHARED_FILE,
            "web.yaml": annotated,
        },
    )

    assert [p.restarted_at for p in load_repo_at(tmp_path).proxies] == ["2026-12-01"] * 2


def test_a_proxy_named_like_a_member_is_an_error_naming_both_documents(tmp_path: Path) -> None:
    write_repo(
        tmp_path,
        {
            "fleet.yaml": FLEET + SET_FORM_DEFAULTS,
            "cloud-init/squid.cloud-config": SHARED_FILE,
            "a.yaml": "kind: Proxy\nmetadata: {name: web-1, labels: {team: x}}\nspec: {}\n",
            "b.yaml": proxyset(2),
        },
    )

    with pytest.raises(InvalidInput) as caught:
        load_repo_at(tmp_path)

    assert [str(p) for p in caught.value.problems] == [
        "b.yaml:3:9: metadata.name: duplicate proxy name 'web-1': a proxy of ProxySet 'web' "
        "here, a Proxy at a.yaml:2:18"
    ]


def test_a_proxyset_s_members_know_their_set_and_a_proxy_document_none(tmp_path: Path) -> None:
    sets = set_form(tmp_path / "b")
    proxies = load_repo_at(write_repo(tmp_path / "a", {"fleet.yaml": FLEET, "p.yaml": PROXY_FORM}))

    assert [p.proxy_set for p in sets.proxies] == ["web"] * 3
    assert {p.proxy_set for p in proxies.proxies} == {""}
