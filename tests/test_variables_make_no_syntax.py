"""${proxy.*} variables give words, never syntax: no secret reference, no line break.

Secret references are resolved where the userData as written has them. A label that,
substituted, would make one (``$${proxy.labels.x}`` with ``{secret:pw}``, or two labels
``$`` and ``{secret:pw}`` side by side) is refused, and the seed ISO a daemon cycle builds
never carries the secret's value. A value holding any line break ``str.splitlines`` knows
(cloud-init's PyYAML breaks lines at U+2028 too) is refused as ``\\n`` is.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from enginefakes import FakeTime, FleetRepo
from secretutil import make_identity, write_secret

from reconciler.adapters.hypervisor.images.fakeimages import FakeImages
from reconciler.adapters.secrets.agesecrets import load_identity
from reconciler.adapters.surface.probe import FakeProber
from reconciler.cli import compose
from reconciler.core.load.secretrefs import SecretAccess
from reconciler.core.load.variables import Values, substitute
from reconciler.core.render.seediso import seed_iso
from reconciler.model.report import RunResult
from reconciler.model.settings import ApplySettings

CANARY = "canary-value-of-pw-5c1e"

BUILT = [
    ("content: $${proxy.labels.x}", {"x": "{secret:pw}"}),
    ("content: ${proxy.labels.a}${proxy.labels.b}", {"a": "$", "b": "{secret:pw}"}),
    (
        "content: ${proxy.labels.a}${proxy.labels.b}${proxy.labels.c}",
        {"a": "$", "b": "{", "c": "secret:pw}"},
    ),
    ("content: ${${proxy.labels.x}", {"x": "secret:pw}"}),
    ("content: ${secret:${proxy.labels.x}}", {"x": "pw"}),
    ("content: ${secret:p${proxy.labels.x}w}", {"x": ""}),
]


def values(labels: dict[str, str]) -> Values:
    return Values(name="p1", zone="z1", host=None, labels=labels, where="p.yaml:1:1")


@pytest.mark.parametrize(("text", "labels"), BUILT, ids=[t for t, _ in BUILT])
def test_a_value_that_would_be_part_of_a_secret_reference_is_not_substituted(
    text: str, labels: dict[str, str]
) -> None:
    substituted, found = substitute(f"#cloud-config\n{text}\n", values(labels))

    assert found
    assert all(f.line == 2 for f in found)
    assert all("cannot make or change a secret reference" in f.message for f in found)
    assert substituted == f"#cloud-config\n{text}\n"  # the variables stay as written


def test_references_written_beside_variables_are_kept_and_the_variables_substituted() -> None:
    text = "a: ${secret:pw}${proxy.labels.x} ${proxy.labels.e}${secret:pw} $${proxy.name}\n"

    assert substitute(text, values({"x": "ok", "e": ""})) == (
        "a: ${secret:pw}ok ${secret:pw} $p1\n",
        [],
    )


LINE_BREAKS = sorted(
    chr(c) for c in range(sys.maxunicode + 1) if len(f"x{chr(c)}x".splitlines()) > 1
)


def test_the_line_breaks_refused_are_those_of_str_splitlines() -> None:
    assert {f"U+{ord(c):04X}" for c in LINE_BREAKS} >= {"U+000A", "U+000D", "U+0085", "U+2028"}


@pytest.mark.parametrize("brk", LINE_BREAKS, ids=[f"U+{ord(c):04X}" for c in LINE_BREAKS])
def test_a_label_holding_any_line_break_is_not_substituted(brk: str) -> None:
    labels = {"greeting": f"hello',{brk}'touch pwned-by-label"}
    text = "#cloud-config\nruncmd: ['echo ${proxy.labels.greeting}']\n"

    substituted, found = substitute(text, values(labels))

    assert substituted == text
    assert [(f.line, f.column) for f in found] == [(2, 16)]
    assert "line break" in found[0].message
    assert "pwned" not in found[0].message


PROXY = """\
apiVersion: proxyfleet/v1
kind: Proxy
metadata:
  name: web-1
  labels: LABELS
spec:
  placement: {zone: a, image: debian-12, machineType: small}
  cloudInit:
    userData: |
      #cloud-config
      write_files:
        - path: /etc/note
          content: "CONTENT"
"""

SEED_CASES = [
    ("$${proxy.labels.x}", '{x: "{secret:pw}"}'),
    ("${proxy.labels.a}${proxy.labels.b}", '{a: "$", b: "{secret:pw}"}'),
]


def cycle(tmp_path: Path, content: str, labels: str) -> tuple[RunResult, list[bytes]]:
    """One daemon cycle over a repo holding secret ``pw``; the result and every seed ISO."""
    root = tmp_path / "fleet"
    root.mkdir()
    world = FleetRepo(root, hosts=("kvm01",))
    (root / "proxies.yaml").write_text(PROXY.replace("LABELS", labels).replace("CONTENT", content))
    identity = tmp_path / "identity.txt"
    write_secret(root, "pw", CANARY + "\n", make_identity(identity))
    engine = compose.engine(
        world.factory,
        images=FakeImages(),
        prober=FakeProber(),
        settings=ApplySettings(observe_timeout=2.0),
        runtime=FakeTime().runtime(),
        secrets=SecretAccess(load_identity(identity), need_values=True),
    )
    report = engine.reconcile_once(root, revision="rev1")
    seeds = [seed_iso(spec) for host in world.hosts.values() for spec in host.specs.values()]
    return report.result, seeds


@pytest.mark.parametrize(("content", "labels"), SEED_CASES, ids=[c for c, _ in SEED_CASES])
def test_no_seed_iso_carries_a_secret_that_labels_spelled(
    tmp_path: Path, content: str, labels: str
) -> None:
    result, seeds = cycle(tmp_path, content, labels)

    assert result is RunResult.STALLED
    assert not any(CANARY.encode() in seed for seed in seeds)


def test_the_seed_iso_does_carry_a_secret_the_userdata_names(tmp_path: Path) -> None:
    """The search above is not vacuous: a reference as written lands in the ISO's bytes."""
    result, seeds = cycle(tmp_path, "${secret:pw}", "{x: y}")

    assert result is RunResult.SUCCESS
    assert len(seeds) == 1
    assert CANARY.encode() in seeds[0]
