"""``proxyfleet plan --repo DIR --inventory FILE [--json]`` against the example fleet repo."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.cli import main
from reconciler.cli.plan import render_plan
from reconciler.core.load.inventory import dump_inventory
from reconciler.core.naming import domain_name, resolve_image
from reconciler.core.plan.digest import proxy_digest
from reconciler.model import Domain, DomainState, HostInventory, Inventory, Owner, Repo


def _vm(
    repo: Repo,
    proxy_name: str,
    host_name: str,
    *,
    stale: bool = False,
    protect: bool | None = None,
) -> Domain:
    """The VM as created under the manifest; ``protect`` overrides the recorded flag."""
    proxy = repo.proxy(proxy_name)
    host = repo.fleet.host(host_name)
    assert proxy is not None and host is not None
    image = resolve_image(repo.fleet, proxy.placement.image)
    machine = repo.fleet.machine_type(proxy.placement.machine_type)
    assert image is not None and machine is not None
    digest = proxy_digest(proxy, host, image=image, machine_type=machine)
    if stale:
        digest = "0" * 64
    name = domain_name(repo.fleet.name, proxy_name, digest)
    recorded = proxy.lifecycle.protect if protect is None else protect
    owner = Owner(repo.fleet.name, proxy_name, digest, protect=recorded)
    return Domain(name, DomainState.RUNNING, owner)


def _converged(repo: Repo) -> Inventory:
    """Every proxy running, up to date, on its pinned host or the first host of its zone."""
    hosts: dict[str, list[Domain]] = {h.name: [] for h in repo.fleet.hosts}
    for proxy in repo.proxies:
        host = proxy.placement.host or repo.fleet.hosts_in_zone(proxy.placement.zone)[0].name
        hosts[host].append(_vm(repo, proxy.name, host))
    return Inventory(
        hosts=tuple(HostInventory(n, True, domains=tuple(d)) for n, d in hosts.items())
    )


def _write(tmp_path: Path, inventory: Inventory) -> Path:
    path = tmp_path / "inventory.json"
    path.write_text(dump_inventory(inventory))
    return path


def test_an_up_to_date_fleet_plans_no_changes_and_exits_0(
    example_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = load_repo_at(example_repo)
    inventory = _write(tmp_path, _converged(repo))
    code = main(["plan", "--repo", str(example_repo), "--inventory", str(inventory)])
    out = capsys.readouterr().out
    assert code == 0
    assert out == f"No changes. {len(repo.proxies)} kept, 0 abandoned.\n"


def _drifted(repo: Repo) -> Inventory:
    """First proxy stale, second missing, an orphan, volumes an interrupted create left, a
    base image, and the last host unreachable."""
    converged = _converged(repo)
    first, second = repo.proxies[0].name, repo.proxies[1].name
    hosts = []
    for host in converged.hosts:
        domains = [d for d in host.domains if d.owner and d.owner.proxy not in (first, second)]
        volumes: tuple[str, ...] = ()
        if any(d.owner and d.owner.proxy == first for d in host.domains):
            volumes = ("base-debian-12.qcow2", "pf-home-gone-22222222.qcow2")
            domains.append(_vm(repo, first, host.name, stale=True))
            orphan = Owner(repo.fleet.name, "retired", "1" * 64)
            domains.append(Domain("pf-home-retired-11111111", DomainState.SHUTOFF, orphan))
        hosts.append(HostInventory(host.name, True, domains=tuple(domains), volumes=volumes))
    last = repo.fleet.hosts[-1].name
    hosts = [h if h.name != last else HostInventory(last, False, error="timeout") for h in hosts]
    return Inventory(hosts=tuple(hosts))


def test_a_drifted_fleet_with_a_host_unread_lists_changes_with_symbols_and_exits_3(
    example_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = load_repo_at(example_repo)
    inventory = _write(tmp_path, _drifted(repo))
    code = main(["plan", "--repo", str(example_repo), "--inventory", str(inventory)])
    out = capsys.readouterr().out
    assert code == 3, "a host unread: the plan is incomplete (docs/operations.md, Exit codes)"
    assert "\033[" not in out, "colour only on a TTY"
    lines = out.splitlines()
    assert any(line.startswith("-/+ replace") and repo.proxies[0].name in line for line in lines)
    assert any(line.startswith("  + create") and repo.proxies[1].name in line for line in lines)
    assert any(
        line.startswith("  - delete") and "pf-home-retired-11111111" in line for line in lines
    )
    assert any(line.startswith("  ! blocked create") for line in lines)
    assert any(line.startswith("  - cleanup") and "pf-home-gone-22222222" in line for line in lines)
    assert "base-debian-12" not in out
    assert lines[-1].startswith(
        "Plan: 1 to create, 0 to start, 0 to relabel, 1 to replace, 1 to delete, 1 to clean up, "
    )


def test_json_output_has_the_documented_fields_and_summary(
    example_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = load_repo_at(example_repo)
    inventory = _write(tmp_path, _drifted(repo))
    code = main(["plan", "--repo", str(example_repo), "--inventory", str(inventory), "--json"])
    document = json.loads(capsys.readouterr().out)
    assert code == 3  # the drifted fleet has a host unread
    assert set(document) == {"actions", "summary"}
    assert set(document["summary"]) == {
        "create",
        "keep",
        "start",
        "relabel",
        "replace",
        "delete",
        "blocked",
        "abandon",
        "cleanup",
    }
    keys = {
        "action",
        "proxy",
        "host",
        "domain",
        "digest",
        "reason",
        "blocks",
        "replaces",
        "volumes",
        "batch",
        "secrets",
    }
    assert all(set(a) == keys for a in document["actions"])
    (replace,) = [a for a in document["actions"] if a["action"] == "replace"]
    assert set(replace["replaces"]) == {"host", "domain"}
    assert replace["replaces"]["domain"].endswith("-00000000")
    assert replace["batch"] == 1
    blocked = [a for a in document["actions"] if a["action"] == "blocked"]
    assert blocked and all(a["blocks"] and a["reason"] for a in blocked)
    (cleanup,) = [a for a in document["actions"] if a["action"] == "cleanup"]
    assert cleanup["volumes"] == ["pf-home-gone-22222222.qcow2"]
    for kind, count in document["summary"].items():
        assert count == sum(a["action"] == kind for a in document["actions"])


def test_a_changed_protect_flag_is_a_relabel_listed_with_a_tilde_and_exits_2(
    example_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = load_repo_at(example_repo)
    protected = next(p for p in repo.proxies if p.lifecycle.protect)
    converged = _converged(repo)
    hosts = []
    for host in converged.hosts:
        domains = [
            _vm(repo, protected.name, host.name, protect=False)
            if d.owner is not None and d.owner.proxy == protected.name
            else d
            for d in host.domains
        ]
        hosts.append(HostInventory(host.name, True, domains=tuple(domains)))
    inventory = _write(tmp_path, Inventory(hosts=tuple(hosts)))

    code = main(["plan", "--repo", str(example_repo), "--inventory", str(inventory)])
    out = capsys.readouterr().out
    code_json = main(["plan", "--repo", str(example_repo), "--inventory", str(inventory), "--json"])
    document = json.loads(capsys.readouterr().out)

    assert code == code_json == 2
    lines = out.splitlines()
    assert lines[0].startswith(f"  ~ relabel         {protected.name} on ")
    assert lines[1] == "      protect: false -> true in the VM's metadata"
    assert lines[-1].startswith("Plan: 0 to create, 0 to start, 1 to relabel, 0 to replace, ")
    assert document["summary"]["relabel"] == 1
    (relabel,) = [a for a in document["actions"] if a["action"] == "relabel"]
    assert relabel["proxy"] == protected.name


def test_an_invalid_inventory_exits_1_naming_file_and_field(
    example_repo: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{"hosts": [{"name": "kvm-a", "reachable": true, "domains": [{}]}]}')
    code = main(["plan", "--repo", str(example_repo), "--inventory", str(path)])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{path}:1:61: hosts[0].domains[0].name: required field is missing" in err  # the {}


def test_an_invalid_repo_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = _write(tmp_path, Inventory())
    code = main(["plan", "--repo", str(tmp_path / "nowhere"), "--inventory", str(inventory)])
    assert code == 1
    assert capsys.readouterr().err


def test_colour_marks_each_listed_line_when_asked(example_repo: Path) -> None:
    from reconciler.core.plan.planner import plan

    repo = load_repo_at(example_repo)
    text = render_plan(plan(repo, _drifted(repo)), color=True)
    assert "\033[33m-/+ replace" in text
    assert text.splitlines()[-1].startswith("Plan:")
