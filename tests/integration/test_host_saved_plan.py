"""``proxyfleet plan -out FILE`` and ``proxyfleet apply FILE`` against the fixture host (a
real libvirtd through a real sshd): what was reviewed is applied, or nothing is."""

from __future__ import annotations

import re
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from hostservices import BlankImage, SshKeys
from test_host_cli import access, fleet_repo

from reconciler.adapters.hypervisor.libvirthost import LibvirtHost
from reconciler.cli import main
from reconciler.model import Host
from reconciler.model.vm import VmSpec

PRUNING = "  policy:\n    prune: true\n    allowEmpty: true\n    acknowledgeShrinkTo: 0\n"


def pruning_repo(root: Path, host: Host) -> Path:
    """The fixture host alone in fleet ``it`` (make_spec's), no proxies, pruning: every VM
    of the fleet on it is one to delete (and its unused base one to clean up)."""
    fleet_repo(root, host)
    fleet = root / "fleet.yaml"
    fleet.write_text(fleet.read_text().split("    - name: gone\n")[0] + PRUNING)
    return root


def test_a_saved_plan_is_refused_while_the_host_differs_and_applied_once_it_is_back_once(
    adapter: LibvirtHost,
    host: Host,
    ssh_keys: SshKeys,
    blank_image: BlankImage,
    make_spec: Callable[..., VmSpec],
    cleanup_domains: list[str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    leftover = make_spec("leftover", blank_image.image)
    intruder = make_spec("intruder", blank_image.image)
    cleanup_domains.extend([leftover.domain, intruder.domain])
    adapter.ensure_image(blank_image.image, blank_image.path)
    adapter.create(leftover)
    repo = pruning_repo(tmp_path / "repo", host)
    where = ["--repo", str(repo), *access(ssh_keys), "--state-dir", str(tmp_path / "state")]
    saved = tmp_path / "plan.json"

    planned = main(["plan", *where, "-out", str(saved)])
    listing = capsys.readouterr().out
    adapter.create(intruder)
    refused = main(["apply", str(saved), *where[2:]])
    refusal = capsys.readouterr().err
    still = {d.name for d in adapter.observe().domains}
    adapter.delete(intruder.domain)
    applied = main(["apply", str(saved), *where[2:]])
    out = capsys.readouterr().out
    again = main(["apply", str(saved), *where[2:]])

    assert planned == 2, listing
    assert any(
        line.strip().startswith("- delete") and leftover.domain in line
        for line in listing.splitlines()
    )
    assert stat.S_IMODE(saved.stat().st_mode) == 0o600
    assert refused == 1
    assert f"host {host.name} runs something else now" in refusal
    assert {leftover.domain, intruder.domain} <= still, "a refused plan deletes nothing"
    assert applied == 0, out
    # Other tests' unused bases in the shared pool are cleaned up too: count no actions.
    assert re.search(r"Apply success: \d+ succeeded, 0 failed, 0 skipped", out), out
    assert leftover.domain not in {d.name for d in adapter.observe().domains}
    assert again == 1, "a plan applied once no longer holds"
