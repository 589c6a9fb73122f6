"""Hostile fleet repos as data (tests/hostile/README.md): validate, then one daemon cycle.

Each case must be refused with exactly the problems of its expected.txt, by
``proxyfleet validate`` and by the daemon (Stalled, against a real git remote),
without showing the canary's content anywhere, without writing outside the
daemon's state dir, and without contacting a host.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from daemonutil import http, real_daemon, running, wait_until
from gitutil import git

from reconciler.adapters.git.gitsource import GitSource
from reconciler.adapters.git.statuswriter import GitStatusWriter
from reconciler.adapters.hypervisor.fakehost import FakeHypervisor
from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.surface.metrics import Metrics
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli import compose, main
from reconciler.engine.daemon import source_cycle
from reconciler.model import Host, Owner
from reconciler.model.report import RunResult
from reconciler.model.settings import DaemonSettings, GuardSettings, ListenSettings, RepoSettings

CASES = Path(__file__).parent / "hostile"
BASE = CASES / "base"
CASE_DIRS = sorted(p for p in CASES.iterdir() if p.is_dir() and p.name != "base")
SECRET = "Hunter2-SECRET canary of the management box"
LEAKS = (SECRET, "Hunter2-SECRET", "lol")


def build(case: Path, repo: Path, outside: Path) -> Path:
    """The case's repo in ``repo``; returns the canary file (in ``outside``)."""
    outside.mkdir(parents=True)
    canary = outside / "secret.yaml"
    canary.write_text(f"kind: Proxy\nmetadata: {{name: '{SECRET}'}}\n")
    shutil.copytree(BASE, repo)
    if (case / "repo").is_dir():
        shutil.copytree(case / "repo", repo, dirs_exist_ok=True)
    for line in _lines(case / "links.txt"):
        name, target = (part.strip() for part in line.split("->"))
        link = repo / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.unlink(missing_ok=True)
        link.symlink_to({"CANARY": str(canary), "CANARY_DIR": str(outside)}.get(target, target))
    for line in _lines(case / "fifos.txt"):  # git carries no FIFO: only validate sees one
        fifo = repo / line.strip()
        fifo.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(fifo)
    for line in _lines(case / "sizes.txt"):
        name, size, *fill = line.split(maxsplit=2)
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_filled(int(size), fill[0]) if fill else "#" + "x" * (int(size) - 2) + "\n")
    for name in _lines(case / "absent.txt"):
        (repo / name.strip()).unlink()
    return canary


def _filled(size: int, fill: str) -> str:
    """``fill`` (``\\n`` a line break, ``{n}`` its repetition's number) repeated within ``size``."""
    parts: list[str] = []
    total = 0
    for n in range(size):
        part = fill.replace("\\n", "\n").replace("{n}", str(n))
        if total + len(part) > size:
            return "".join(parts)
        parts.append(part)
        total += len(part)
    return "".join(parts)


def limited_validate(repo: Path, case: Path) -> tuple[int, str, str]:
    """``proxyfleet validate`` in a child under the case's limits.txt (``memory MB``: its
    address space, RLIMIT_AS): exit code, stdout, stderr."""
    memory = dict(line.split() for line in _lines(case / "limits.txt"))["memory"]

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (int(memory) << 20, int(memory) << 20))

    script = "import sys; from reconciler.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run(
        [sys.executable, "-c", script, "validate", str(repo)],
        preexec_fn=limit,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.returncode, done.stdout, done.stderr


def _lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.strip()] if path.exists() else []


def snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in sorted(directory.rglob("*"))
    }


def test_there_are_hostile_cases_for_every_class() -> None:
    names = {p.name for p in CASE_DIRS}
    assert len(names) >= 12
    words = ("symlink", "bomb", "nesting", "mib", "cloudinit", "image", "timeout", "shrink")
    for word in words:
        assert any(word in name for name in names), word


@pytest.mark.parametrize("case", CASE_DIRS, ids=[p.name for p in CASE_DIRS])
def test_validate_refuses_the_hostile_repo_naming_the_file(
    case: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = (case / "expected.txt").read_text().splitlines()
    build(case, tmp_path / "repo", tmp_path / "outside")
    if (case / "limits.txt").exists():
        code, out, err = limited_validate(tmp_path / "repo", case)
    else:
        code = main(["validate", str(tmp_path / "repo")])
        out, err = capsys.readouterr()
    assert err.splitlines() == expected
    # Only the box can refuse some repos (its allow-lists, its pinned fleet id): daemon.txt.
    assert code == (1 if expected else 0)
    assert expected or (case / "daemon.txt").exists()
    for leak in LEAKS:
        assert leak not in err + out


@pytest.mark.parametrize("case", CASE_DIRS, ids=[p.name for p in CASE_DIRS])
def test_a_daemon_cycle_stalls_on_the_hostile_repo_and_stays_up(case: Path, tmp_path: Path) -> None:
    daemon_file = case / "daemon.txt"
    expected = (daemon_file if daemon_file.exists() else case / "expected.txt").read_text()
    expected_lines = expected.splitlines()
    bare = tmp_path / "remote.git"
    work = tmp_path / "operator"
    state = tmp_path / "state"
    outside = tmp_path / "outside"
    canary = build(case, work, outside)
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", f"hostile: {case.name}")
    git(work, "push", "-q", str(bare), "main")
    before = snapshot(outside), snapshot(work)
    hosts: list[FakeHypervisor] = []

    owned = _lines(case / "owned.txt")

    def make_host(host: Host) -> FakeHypervisor:
        hosts.append(FakeHypervisor(host.name))
        for proxy in owned:  # VMs this fleet already runs (a shrink needs something to lose)
            owner = Owner(fleet="hostile", proxy=proxy, digest="0" * 64)
            hosts[-1].add_domain(f"pf-hostile-{proxy}-00000000", owner=owner)
        return hosts[-1]

    repo_settings = RepoSettings(url=f"file://{bare}")
    guards = GuardSettings(
        fleet="hostile",
        state_file=state / "deletes.json",
        allowed_file_dirs=(Path("/srv/proxyfleet-images"),),
    )
    engine = compose.engine(
        make_host,  # type: ignore[arg-type]
        images=FakeImages(),  # type: ignore[arg-type]
        prober=FakeProber(),
        guards=guards,
    )
    settings = DaemonSettings(
        repo=repo_settings, listen=ListenSettings(port=0), interval=3600, state_dir=state
    )
    daemon = real_daemon(
        settings,
        source_cycle(
            GitSource(repo_settings, state / "repo"),
            lambda root, rev: engine.reconcile_once(root, revision=rev),
        ),
        metrics=Metrics(),
        status=GitStatusWriter(repo_settings, settings.status, state / "status"),
        handle_signals=False,
        stop=threading.Event(),
    )
    with running(daemon):
        # A wait for the cycle to end, not a speed target: the heaviest cases (a merge-key
        # bomb, 500 KiB manifests) took 74 s beside two lab runs (make test, 2026-12-06).
        assert wait_until(lambda: len(daemon.reports) == 1, timeout=600)
        assert http(daemon, "/healthz")[0] == 200
    report = daemon.reports[0]
    assert report.result is RunResult.STALLED
    assert list(report.problems) == expected_lines
    if owned:  # observed (read-only), nothing else
        assert [h.mutations for h in hosts] == [[]]
        assert {c.method for h in hosts for c in h.calls} == {"observe"}
    else:
        assert hosts == []
    assert (snapshot(outside), snapshot(work)) == before
    status = git(bare, "show", "proxyfleet-status:.proxyfleet/status.yaml")
    status += git(bare, "show", "proxyfleet-status:.proxyfleet/STATUS.md")
    for leak in LEAKS:
        assert leak not in status
        assert all(leak not in p for p in report.problems)
    assert canary.read_text().startswith("kind: Proxy")
