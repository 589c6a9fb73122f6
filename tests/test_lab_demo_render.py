"""The demo's rendering of examples/fleet-repo for the lab changes userData only where squid
would refuse the lab's health checks: ``acl NAME src`` lines that do not cover the lab's
management range get it appended; every other byte of every proxy's userData stays, wherever
it is written (inline, fleet.yaml's proxyDefaults, a userDataFile with variables)."""

from __future__ import annotations

import ipaddress
import shutil
from pathlib import Path

from lab.demo import EXAMPLE, LAB_CLIENTS, admit_lab, render_files
from reconciler.adapters.repo.diskfiles import load_repo_at

LAB = {
    "image": {"url": "http://127.0.0.1:8079/debian.qcow2", "sha256": "ab" * 32},
    "hosts": [
        {"name": f"lab-{n}", "address": f"10.77.{n}.2", "port": 22, "user": "root"}
        for n in (1, 2, 3)
    ],
    "probeUrl": "http://10.79.0.1/generate_204",
}


def test_every_example_squid_acl_admits_the_lab_and_nothing_else_changes(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "repo")
    render_files(tmp_path / "repo", LAB)
    examples = {p.name: p.cloud_init.user_data for p in load_repo_at(Path(EXAMPLE)).proxies}
    rendered = {p.name: p.cloud_init.user_data for p in load_repo_at(tmp_path / "repo").proxies}
    assert examples and rendered.keys() == examples.keys()
    for name, before in examples.items():
        after = rendered[name]
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


def test_the_rendered_example_points_every_proxy_at_the_lab(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLE, tmp_path / "repo")
    render_files(tmp_path / "repo", LAB)

    repo = load_repo_at(tmp_path / "repo")

    assert {p.health.probe_url for p in repo.proxies} == {LAB["probeUrl"]}
    assert {h.name for h in repo.fleet.hosts} == {"lab-1", "lab-2", "lab-3"}
    assert {p.placement.host for p in repo.proxies} == {None, "lab-3"}


def test_an_acl_that_already_covers_the_lab_is_left_alone() -> None:
    text = "acl lan src 10.0.0.0/8 192.168.0.0/16\n  acl office src 10.20.0.0/16 \n"
    assert admit_lab(text) == (
        "acl lan src 10.0.0.0/8 192.168.0.0/16\n  acl office src 10.20.0.0/16 10.77.0.0/16\n"
    )
