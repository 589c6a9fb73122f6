"""A canary: a unique secret value, followed through every output of a run, shows up only in
the seed.

A fleet repo whose proxies use ``${secret:squid-password}`` goes through what an operator
and the daemon see: ``validate``, ``plan`` (text and JSON), ``apply`` (text and JSON), a
daemon cycle's report, status.yaml, STATUS.md and the metrics, every log record at DEBUG,
and every file the run wrote; then the secret is rotated and it all happens again (the
rotation rolls the proxies). The value must be found in the seed each VM got (so the
search is not vacuous) and nowhere else.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from enginefakes import FakeTime, FleetRepo
from secretutil import make_identity, write_secret

from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.repo.diskfiles import load_repo_at
from reconciler.adapters.secrets.agesecrets import load_identity
from reconciler.adapters.state.historystore import FileHistoryStore
from reconciler.adapters.surface.metrics import Metrics
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli import apply, build_parser, compose, main
from reconciler.cli.logsetup import LogfmtFormatter
from reconciler.core.load.inventory import dump_inventory
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.core.render.seediso import seed_files
from reconciler.core.status import statusdoc
from reconciler.core.status.statusmd import render_markdown
from reconciler.engine.observe import observe
from reconciler.model.settings import ApplySettings

PROXIES = """\
apiVersion: proxyfleet/v1
kind: Proxy
metadata:
  name: NAME
spec:
  placement: {zone: a, image: debian-12, machineType: small}
  cloudInit:
    userData: |
      #cloud-config
      hostname: NAME
      write_files:
        - path: /etc/squid/passwd
          content: "ops:${secret:squid-password}"
"""


SHARED_FILE = """\
#cloud-config
hostname: ${proxy.name}
write_files:
  - path: /etc/squid/passwd
    content: "ops:${secret:squid-password}"
"""
PROXY_SET = """\
apiVersion: proxyfleet/v1
kind: ProxySet
metadata:
  name: web
spec:
  replicas: 2
  placement: {zone: a, image: debian-12, machineType: small}
  cloudInit:
    userDataFile: cloud-init/squid.cloud-config
"""


class Run:
    """Everything one scenario printed, logged and wrote, to be searched at the end.

    ``shared``: the proxies are a ProxySet whose userData is a userDataFile (the secret's
    reference in that file); otherwise two Proxy documents with inline userData.
    """

    def __init__(self, tmp_path: Path, *, shared: bool = False) -> None:
        self.root = tmp_path / "fleet"
        self.root.mkdir()
        self.state = tmp_path / "state"
        self.state.mkdir()
        self.identity = tmp_path / "identity.txt"
        self.recipient = make_identity(self.identity)
        self.world = FleetRepo(self.root)
        if shared:
            (self.root / "cloud-init").mkdir()
            (self.root / "cloud-init" / "squid.cloud-config").write_text(SHARED_FILE)
            (self.root / "proxies.yaml").write_text(PROXY_SET)
        else:
            (self.root / "proxies.yaml").write_text(
                "---\n".join(PROXIES.replace("NAME", n) for n in ("web-1", "web-2"))
            )
        self.user_data = (
            self.root / "cloud-init" / "squid.cloud-config"
            if shared
            else self.root / "proxies.yaml"
        )
        self.engine = compose.engine(
            self.world.factory,
            images=FakeImages(),
            prober=FakeProber(),
            settings=ApplySettings(observe_timeout=2.0),
            runtime=FakeTime().runtime(),
            history=FileHistoryStore(self.state / "history.json"),
            secrets=SecretAccess(load_identity(self.identity), need_values=True),
        )
        self.outputs: list[str] = []
        self.metrics = Metrics()
        self.previous: dict[str, object] | None = None

    def rotate(self, value: str) -> None:
        write_secret(self.root, "squid-password", value + "\n", self.recipient)

    def cli(self, capsys: pytest.CaptureFixture[str], *argv: str) -> int:
        code = main(list(argv))
        captured = capsys.readouterr()
        self.outputs += [captured.out, captured.err]
        return code

    def plan(self, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
        repo = load_repo_at(self.root)
        hosts = dict(self.world.hosts)
        inventory = self.state / "inventory.json"
        inventory.write_text(dump_inventory(observe(repo.fleet, hosts, timeout=2.0).inventory))
        common = ["--repo", str(self.root), "--inventory", str(inventory)]
        identity = ["--age-identity", str(self.identity)]
        assert self.cli(capsys, "plan", *common, *identity) == 2
        assert self.cli(capsys, "plan", *common, *identity, "--json") == 2
        result: dict[str, object] = json.loads(self.outputs[-2])
        return result

    def apply(self, capsys: pytest.CaptureFixture[str]) -> None:
        for flags in (["--yes"], ["--yes", "--json"]):
            args = build_parser().parse_args(["apply", "--repo", str(self.root), *flags])
            apply.apply_with(args, self.engine)
            captured = capsys.readouterr()
            self.outputs += [captured.out, captured.err]

    def daemon_cycle(self, revision: str) -> None:
        report = self.engine.reconcile_once(self.root, revision=revision)
        self.metrics.record(report)
        doc = statusdoc.build(report, self.previous, runs=[statusdoc.run_entry(report)])
        self.previous = doc
        (self.state / "status.yaml").write_text(statusdoc.dump_yaml(doc))
        (self.state / "STATUS.md").write_text(render_markdown(doc))
        self.outputs += [repr(report), str(report), self.metrics.exposition().decode()]

    def seeds(self) -> list[bytes]:
        return [
            seed_files(spec)["user-data"]
            for host in self.world.hosts.values()
            for spec in host.specs.values()
        ]

    def written(self) -> list[str]:
        return [p.read_text(errors="replace") for p in self.state.rglob("*") if p.is_file()]


class Lines(logging.Handler):
    """Every record of the ``reconciler`` loggers, formatted as the daemon's log lines are."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(LogfmtFormatter())
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def log_lines() -> Iterator[list[str]]:
    """On the package logger, so that a command resetting the root logger keeps it."""
    handler, logger = Lines(), logging.getLogger("reconciler")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler.lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.mark.parametrize("shared", [False, True], ids=["inline", "proxyset-user-data-file"])
def test_a_secret_value_appears_in_the_seed_and_in_no_output_log_status_or_metric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], log_lines: list[str], shared: bool
) -> None:
    first, second = (f"canary-{uuid.uuid4().hex}" for _ in range(2))
    run = Run(tmp_path, shared=shared)
    run.rotate(first)

    assert run.cli(capsys, "validate", "--repo", str(run.root)) == 0
    assert (
        run.cli(capsys, "validate", "--repo", str(run.root), "--age-identity", str(run.identity))
        == 0
    )
    planned = run.plan(capsys)
    assert {a["action"] for a in planned["actions"]} == {"create"}  # type: ignore[index]
    assert all(a["secrets"] == {"squid-password": "(sensitive)"} for a in planned["actions"])  # type: ignore[index]
    assert "      secrets: squid-password (sensitive)" in run.outputs[-4]  # the text plan
    run.apply(capsys)
    run.daemon_cycle("rev1")
    assert sum(first.encode() in seed for seed in run.seeds()) == 2

    run.rotate(second)
    replaced = run.plan(capsys)
    actions = replaced["actions"]
    # One replace per zone at a time: the second waits, blocked, for a later run.
    assert sorted(a["action"] for a in actions) == ["blocked", "replace"]  # type: ignore[union-attr,index]
    for _ in range(4):  # replace, delete its old VM, the next replace, its old VM
        run.daemon_cycle("rev2")
    run.apply(capsys)
    assert sum(second.encode() in seed for seed in run.seeds()) == 2  # the rolled VMs

    # A schema error on the secret's own line, with the identity at hand: no value either.
    text = run.user_data.read_text()
    assert "hostname: " in text
    run.user_data.write_text(
        text.replace("hostname: ", "hostname: [", 1).replace("\nwrite", "]\nwrite", 1)
    )
    assert (
        run.cli(capsys, "validate", "--repo", str(run.root), "--age-identity", str(run.identity))
        == 1
    )
    run.daemon_cycle("rev3")

    seen = [*run.outputs, *log_lines, *run.written()]
    # The fakes log what the engine logs (the libvirt traces are the lab test's to search).
    assert sum("succeeded." in line for line in log_lines) >= 4, log_lines
    assert len(run.written()) >= 3, run.written()
    for value in (first, second):
        leaks = [text for text in seen if value in text]
        assert leaks == [], f"{value} leaked"
