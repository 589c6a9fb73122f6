"""``make bench``: every benchmark, one table, written into docs/performance.md.

Each row runs in a process of its own (``benchmarks.bench_*``, and
``plan_scale.py``) that takes one warm-up and ``--runs`` measured runs and
hands its samples back as JSON. The table gives medians with the min-max
range, the ratio of the medians and the target; the machine (CPU, cores,
memory, versions, load average, other guests running) is printed above it.
Nothing is asserted: a missed target is a "no" in the table.

docs/performance.md keeps its hand-written text; only the part between the
``bench:begin`` and ``bench:end`` markers is replaced.

Run: ``PROXYFLEET_LAB_INSTANCE=2 make bench`` (a lab instance of its own, so
that it can run beside the tests and the demo), or
``.venv/bin/python -m benchmarks.run [--rows idle,create,...] [--runs N]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.common import (
    ROOT,
    Metric,
    Result,
    lab_instance,
    lab_up,
    load_text,
    machine_info,
)
from reconciler.model.settings import LIBVIRT_TRANSPORTS, ApplySettings, SshSettings

DOC = ROOT / "docs" / "performance.md"
BEGIN = "<!-- bench:begin (written by make bench; edit outside these markers) -->"
END = "<!-- bench:end -->"


@dataclass(frozen=True)
class Row:
    key: str
    command: list[str]
    max_runs: int | None = None
    """At most this many measured runs, whatever ``--runs`` says (None: ``--runs``)."""
    lab: bool = True
    """Whether the row needs the lab (``lab up`` runs first only when a wanted row does)."""


ROWS = (
    Row("idle", ["-m", "benchmarks.bench_idle"]),
    Row("create", ["-m", "benchmarks.bench_create"]),
    Row("delete", ["-m", "benchmarks.bench_delete"]),
    Row("upload", ["-m", "benchmarks.bench_upload"]),
    Row("upload3", ["-m", "benchmarks.bench_upload", "--hosts", "3"]),
    Row("trigger", ["-m", "benchmarks.bench_trigger"]),
    Row("plan", [str(ROOT / "benchmarks" / "plan_scale.py")], lab=False),
    Row("dns", ["-m", "benchmarks.bench_dns"], lab=False),
    # One rollout of 20 booting guests takes 10-20 minutes under TCG: one measured run.
    Row("rollout", ["-m", "benchmarks.bench_rollout"], max_runs=1),
    # The same rollout with a VM killed while it is in flight: healing does not wait for it.
    Row("rollout-heal", ["-m", "benchmarks.bench_rollout", "--kill"], max_runs=1),
    # Last: it brings up 10 light hosts, which the rows above (one host each) would remove.
    Row("fleet", ["-m", "benchmarks.bench_fleet"]),
)


def run_row(
    row: Row, runs: int, scratch: Path, *, reuse: bool = False
) -> tuple[Result | None, float | None]:
    """Run one row's benchmark (its JSON and seconds land in ``scratch``); with ``reuse``,
    a row whose JSON is already there is read instead."""
    out = scratch / f"{row.key}.json"
    took = scratch / f"{row.key}.seconds"
    if reuse and out.exists():
        print(f"\n=== {row.key}: reused {out} ===", flush=True)
        return Result.load(out), float(took.read_text()) if took.exists() else None
    runs = min(runs, row.max_runs) if row.max_runs else runs
    started = time.monotonic()
    print(f"\n=== {row.key} ===", flush=True)
    proc = subprocess.run(
        [sys.executable, *row.command, "--runs", str(runs), "--json", str(out)],
        cwd=ROOT,
        check=False,
    )
    seconds = time.monotonic() - started
    took.write_text(f"{seconds:.0f}\n")
    if proc.returncode != 0 or not out.exists():
        print(f"=== {row.key} failed (exit {proc.returncode}) ===", flush=True)
        return None, seconds
    return Result.load(out), seconds


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def _met(ok: bool) -> str:
    return "yes" if ok else "**no**"


Line = tuple[str, str, str, str, str, str]


def idle_line(r: Result) -> Line:
    pf, floor, rpcs = r.metrics["proxyfleet"], r.metrics["floor"], r.metrics["rpcs"]
    ratio = pf.median / floor.median
    muts = int(max(r.metrics["mutating"].samples))
    return (
        "1. idle reconcile: 200 owned (shut off) + 20 foreign VMs, observe + plan",
        f"{in_ms(pf)}, {int(rpcs.median)} RPCs, {muts} mutating",
        f"minimal libvirt loop {in_ms(floor)}, {int(r.metrics['floor_rpcs'].median)} RPCs",
        _ratio(pf.median, floor.median),
        "<= 1.2x, 0 mutating",
        _met(ratio <= 1.2 and muts == 0),
    )


def in_ms(metric: Metric) -> str:
    return Metric(metric.name, "ms", [s * 1000 for s in metric.samples]).text(0)


def create_lines(r: Result) -> list[Line]:
    floor = r.metrics.get("floor")
    lines: list[Line] = []
    for key, what in (
        ("proxyfleet", "2. create 20 VMs (define + start, boot not awaited)"),
        ("proxyfleet_wider", "2b. the same with `concurrency.perHost` from `--wider`"),
    ):
        pf = r.metrics.get(key)
        if pf is None:
            continue
        lines.append(
            (
                what,
                f"`apply --no-wait` {pf.text(1)}",
                f"`kcli create vm -c 20` {floor.text(1)}" if floor else "kcli not run",
                _ratio(pf.median, floor.median) if floor else "-",
                "<= 0.5x",
                _met(pf.median / floor.median <= 0.5) if floor else "-",
            )
        )
    return lines


def physical_line(r: Result, what: str, target: float | None) -> Line | None:
    """proxyfleet's ``apply`` against the row's minimal libvirt loop (``physical``)."""
    pf, floor = r.metrics.get("proxyfleet"), r.metrics.get("physical")
    if pf is None or floor is None:
        return None
    ratio = pf.median / floor.median
    return (
        what,
        f"`apply` {pf.text(1)}",
        f"minimal libvirt loop {floor.text(1)}",
        _ratio(pf.median, floor.median),
        f"<= {target}x" if target is not None else "-",
        _met(ratio <= target) if target is not None else "-",
    )


def create_floor_lines(r: Result) -> list[Line]:
    """Row 2's two comparisons: kcli, then the physical floor."""
    line = physical_line(
        r,
        "2a. create 20 VMs against the physical floor "
        f"(same calls, {ApplySettings().per_host_concurrency} at a time)",
        1.2,
    )
    return [*create_lines(r), *([line] if line else [])]


def delete_lines(r: Result) -> list[Line]:
    kcli = r.metrics.get("floor")
    n = int(r.metrics["count"].median) if "count" in r.metrics else 20

    def against_kcli(what: str, label: str, ours: Metric) -> Line:
        """``ours`` judged against a quarter of kcli's delete of the same VMs."""
        return (
            what,
            f"{label} {ours.text(1)}",
            f"`kcli delete vm -c {n}` {kcli.text(1)}" if kcli else "kcli not run",
            _ratio(ours.median, kcli.median) if kcli else "-",
            "<= 0.25x",
            _met(ours.median / kcli.median <= 0.25) if kcli else "-",
        )

    lines = [
        against_kcli(
            f"2c. delete {n} paused VMs with their volumes (nothing left on the host)",
            "`apply`",
            r.metrics["proxyfleet"],
        )
    ]
    width = ApplySettings().delete_concurrency
    line = physical_line(
        r, f"2d. delete {n} VMs against the physical floor ({width} at a time)", None
    )
    lines += [line] if line else []
    daemon = r.metrics.get("daemon")
    if daemon is not None:
        what = f"2e. the same {n} deletes by the daemon (commit -> last volume deleted)"
        lines.append(against_kcli(what, "`run`", daemon))
    return lines


def upload_lines(r: Result) -> list[Line]:
    floor = r.metrics["floor"]
    hosts = int(r.metrics["hosts"].median) if "hosts" in r.metrics else 1
    what = (
        "3. upload a 1 GiB base image"
        if hosts == 1
        else f"3b. upload a 1 GiB base image to {hosts} hosts at once (MB/s summed)"
    )
    scp = "`scp`" if hosts == 1 else f"{hosts} `scp` at once"
    lines: list[Line] = []
    for transport in LIBVIRT_TRANSPORTS:
        pf = r.metrics.get(f"proxyfleet_{transport}")
        if pf is None:
            continue
        default = " (the default)" if transport == SshSettings().libvirt_transport else ""
        lines.append(
            (
                f"{what} (sha256 while streaming), `ssh.libvirtTransport: {transport}`{default}",
                f"`ensure_image` {pf.text(0)}",
                f"{scp} {floor.text(0)}",
                _ratio(pf.median, floor.median),
                ">= 0.9x",
                _met(pf.median / floor.median >= 0.9),
            )
        )
    return lines


def trigger_lines(r: Result) -> list[Line]:
    lines: list[Line] = []
    for key, what in (("webhook", "webhook"), ("watch", "file watch")):
        m = r.metrics[key]
        started = r.metrics[f"{key}_started"]
        lines.append(
            (
                f"4. commit -> first create RPC, {what}",
                f"{m.text(2)} (VM started after {started.median:.1f} s)",
                "-",
                "-",
                "<= 2 s",
                _met(m.median <= 2.0),
            )
        )
    return lines


def plan_line(r: Result) -> Line:
    pf, rss = r.metrics["proxyfleet"], r.metrics["rss"]
    return (
        "5. plan 5,000 proxies / 100 hosts",
        f"{pf.text(2)}, peak RSS {rss.median:.0f} MiB",
        "-",
        "-",
        "<= 1 s, <= 200 MB",
        _met(pf.median <= 1.0 and rss.median * 2**20 / 1e6 <= 200),
    )


ROLLOUT_TARGET = 1.15
"""Row 6's wall time against its floor (issue 39: 1.41x while runs waited for boots)."""


def rollout_line(r: Result) -> Line:
    wall, floor, least = r.metrics["proxyfleet"], r.metrics["floor"], r.metrics["least_answering"]
    n = int(r.metrics["proxies"].median)
    allowed = int(r.metrics["max_unavailable"].median)
    batches = int(r.metrics["batches"].median)
    # A run whose replaces failed did not roll the update out: its wall time is no rollout's,
    # and its "one VM" is the few that passed. Results from before these metrics: unknown.
    planned, done = r.metrics.get("replaces"), r.metrics.get("replaced")
    complete, replaced = False, ""
    if planned is not None and done is not None:
        complete = done.low >= planned.high
        replaced = f", {done.low:.0f} of {planned.high:.0f} replaced"
    return (
        f"6. image update rolled over {n} proxies (create-before-destroy, health-gated batches)",
        f"{wall.text(0)}, least answering {least.low:.0f}/{n}{replaced}",
        f"floor: {batches} batches x one VM's create-to-healthy "
        f"{r.metrics['one_vm'].median:.0f} s = {floor.median:.0f} s",
        _ratio(wall.median, floor.median) if complete else "-",
        f"every replace succeeds, least answering >= {n - allowed}, <= {ROLLOUT_TARGET}x",
        _met(
            complete and least.low >= n - allowed and wall.median <= ROLLOUT_TARGET * floor.median
        ),
    )


def heal_line(r: Result) -> list[Line]:
    """Row 6b: the kill's time to its start, then the rollout it happened in."""
    heal, follow_up = r.metrics["heal"], r.metrics["follow_up"].median
    n = int(r.metrics["proxies"].median)
    line = (
        f"6b. healing during a rollout: a VM killed while {n} proxies roll (kill -> start)",
        heal.text(1),
        f"follow-up interval {follow_up:g} s",
        _ratio(heal.median, follow_up),
        "<= 2 follow-up intervals",
        _met(heal.high <= 2 * follow_up),
    )
    rollout = rollout_line(r)
    return [line, (f"6c. {rollout[0][3:]}, with that kill", *rollout[1:])]


def fleet_line(r: Result) -> Line:
    pf, floor, rpcs = r.metrics["proxyfleet"], r.metrics["floor"], r.metrics["rpcs"]
    muts = int(max(r.metrics["mutating"].samples))
    rss_mb = r.metrics["rss"].median * 2**20 / 1e6
    hosts, domains = int(r.metrics["hosts"].median), int(r.metrics["domains"].median)
    at_once = r.metrics.get("together")
    together = f"; all {hosts} loops at once {in_ms(at_once)}" if at_once else ""
    return (
        f"7. the whole fleet idle: {hosts} hosts, {domains} owned (shut off) VMs, "
        "observe (hosts at once) + plan",
        f"{in_ms(pf)}, {int(rpcs.median)} RPCs, {muts} mutating, peak RSS {rss_mb:.0f} MB",
        f"slowest host's minimal loop {in_ms(floor)}{together}",
        _ratio(pf.median, floor.median),
        "<= 1.2x, 0 mutating, RSS <= 150 MB",
        _met(pf.median / floor.median <= 1.2 and muts == 0 and rss_mb <= 150),
    )


def dns_line(r: Result) -> Line:
    n = int(r.metrics["proxies"].median)
    first, rollout, idle = (r.metrics[f"{phase} run"] for phase in ("first", "rollout", "idle"))
    most = int(max(r.metrics["updates"].samples))
    size = r.metrics["rollout UPDATE"]
    return (
        f"8. one run's DNS update of a {n}-proxy fleet (RFC 2136 to BIND 9, TSIG): "
        "every address moved",
        f"{in_ms(rollout)}, 1 UPDATE of {size.median / 1024:.0f} KiB "
        f"(first publish {in_ms(first)}, nothing to change {in_ms(idle)})",
        "-",
        "-",
        "one UPDATE message per run",
        _met(most <= 1),
    )


LINES: dict[str, Callable[[Result], list[Line]]] = {
    "idle": lambda r: [idle_line(r)],
    "create": create_floor_lines,
    "delete": delete_lines,
    "upload": upload_lines,
    "upload3": upload_lines,
    "trigger": trigger_lines,
    "plan": lambda r: [plan_line(r)],
    "dns": lambda r: [dns_line(r)],
    "rollout": lambda r: [rollout_line(r)],
    "rollout-heal": heal_line,
    "fleet": lambda r: [fleet_line(r)],
}


def table(lines: list[Line]) -> str:
    head = ("benchmark", "proxyfleet: median (min-max)", "baseline", "ratio", "target", "met")
    rows = [head, ("---",) * len(head), *lines]
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def render(
    machine: dict[str, str],
    lines: list[Line],
    results: dict[str, Result | None],
    *,
    runs: int,
    started: datetime,
    seconds: dict[str, float | None],
) -> str:
    parts = [
        f"Measured {started:%Y-%m-%d %H:%M} UTC on lab instance {lab_instance()}: "
        f"median of {runs} runs after a warm-up, min-max in brackets.",
        "",
        "| machine | |",
        "|---|---|",
        *(f"| {key} | {value} |" for key, value in machine.items()),
        "",
        table(lines),
        "",
    ]
    for key, result in results.items():
        took = f" [{seconds[key]:.0f} s]" if seconds[key] is not None else " [reused]"
        if result is None:
            parts.append(f"- **{key}**: failed; run it alone to see why{took}")
            continue
        load = f"load {load_text(result.load_before)} before, {load_text(result.load_after)} after"
        busy = f"; {result.busy}" if result.busy else ""
        notes = "; ".join(result.notes)
        parts.append(f"- **{key}**{took}: {notes} ({load}{busy})")
    return "\n".join(parts) + "\n"


def write_doc(body: str) -> None:
    text = DOC.read_text() if DOC.exists() else f"# Performance\n\n{BEGIN}\n{END}\n"
    if BEGIN not in text or END not in text:
        text = text.rstrip("\n") + f"\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{BEGIN}\n{body}{END}{tail}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--rows", default=",".join(r.key for r in ROWS), help="comma-separated subset"
    )
    parser.add_argument("--no-doc", action="store_true", help="print only")
    parser.add_argument(
        "--json-dir",
        type=Path,
        help="keep every row's result here (default: a temporary directory)",
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --json-dir: a row whose result is already there is read, not run "
        "(finish a make bench that one row stopped)",
    )
    args = parser.parse_args()
    wanted = args.rows.split(",")
    started = datetime.now(UTC)
    if any(row.lab for row in ROWS if row.key in wanted):
        lab_up()
    machine = machine_info()
    print("\n".join(f"{k}: {v}" for k, v in machine.items()), flush=True)
    results: dict[str, Result | None] = {}
    seconds: dict[str, float | None] = {}
    with contextlib.ExitStack() as stack:
        if args.json_dir is not None:
            args.json_dir.mkdir(parents=True, exist_ok=True)
            scratch = args.json_dir
        else:
            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pf-bench-")))
        for row in ROWS:
            if row.key in wanted:
                results[row.key], seconds[row.key] = run_row(
                    row, args.runs, scratch, reuse=args.reuse
                )
    machine["load average"] += f" at the start; {load_text(os.getloadavg())} at the end"
    lines: list[Line] = []
    for key, result in results.items():
        if result is not None:
            lines.extend(LINES[key](result))
    body = render(machine, lines, results, runs=args.runs, started=started, seconds=seconds)
    print("\n" + body, flush=True)
    if not args.no_doc:
        write_doc(body)
        print(f"written to {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
