"""Issue 17 items 2 and 3: the delete row and the create row's physical floor in ``make bench``'s
table, and the delete row's check that nothing is left on the host (pure parts)."""

from __future__ import annotations

from pathlib import Path

from benchmarks.bench_delete import left_in_dirs, named
from benchmarks.bench_rollout import batches_of
from benchmarks.common import Metric, Result
from benchmarks.run import (
    LINES,
    ROWS,
    create_floor_lines,
    delete_lines,
    heal_line,
    rollout_line,
    run_row,
)


def result(row: str, **samples: list[float]) -> Result:
    r = Result(row=row)
    for name, values in samples.items():
        r.add(name, "s", values)
    return r


def test_the_create_row_prints_kcli_and_the_physical_floor_with_ratios_of_the_medians() -> None:
    r = result(
        "create", proxyfleet=[10.0, 12.0, 30.0], floor=[40.0, 41.0, 42.0], physical=[9.0, 10.0]
    )

    kcli, floor = create_floor_lines(r)

    assert kcli[0].startswith("2. create 20 VMs") and kcli[3] == "0.29x" and kcli[5] == "yes"
    assert floor[0].startswith("2a.") and "minimal libvirt loop 9.5 (9.0-10.0) s" in floor[2]
    assert floor[3] == "1.26x" and floor[4] == "<= 1.2x" and floor[5] == "**no**"


def test_a_create_row_without_the_floor_prints_only_the_kcli_line() -> None:
    r = result("create", proxyfleet=[10.0], floor=[40.0])

    assert [line[0][:2] for line in create_floor_lines(r)] == ["2."]


def test_the_delete_row_is_judged_against_a_quarter_of_kcli() -> None:
    r = result("delete", proxyfleet=[10.0, 11.0, 12.0], floor=[44.0, 44.0], physical=[8.0, 8.0])
    r.add("count", "VMs", [20])

    kcli, floor = delete_lines(r)

    assert kcli[0] == "2c. delete 20 paused VMs with their volumes (nothing left on the host)"
    assert kcli[2] == "`kcli delete vm -c 20` 44.0 (44.0-44.0) s"
    assert (kcli[3], kcli[4], kcli[5]) == ("0.25x", "<= 0.25x", "yes")
    assert floor[0].startswith("2d.") and (floor[3], floor[4], floor[5]) == ("1.38x", "-", "-")


def test_a_delete_row_over_the_target_says_no() -> None:
    r = result("delete", proxyfleet=[20.0], floor=[40.0])

    (kcli,) = delete_lines(r)

    assert (kcli[3], kcli[5]) == ("0.50x", "**no**")


def test_the_daemons_deletes_are_a_line_of_their_own_judged_against_the_same_kcli() -> None:
    r = result(
        "delete",
        proxyfleet=[10.0],
        floor=[40.0, 40.0],
        physical=[8.0],
        daemon=[9.0, 9.2, 12.0],
    )

    _kcli, _floor, daemon = delete_lines(r)

    assert daemon[0] == "2e. the same 20 deletes by the daemon (commit -> last volume deleted)"
    assert daemon[1] == "`run` 9.2 (9.0-12.0) s"
    assert (daemon[3], daemon[4], daemon[5]) == ("0.23x", "<= 0.25x", "yes")


def test_every_row_make_bench_runs_has_its_table_lines() -> None:
    assert {row.key for row in ROWS} == set(LINES)
    assert [row.key for row in ROWS][:3] == ["idle", "create", "delete"]


def test_leftovers_name_the_vms_files_in_the_pool_nvram_and_definitions(tmp_path: Path) -> None:
    for sub, name in (
        ("var-lib-libvirt/images", "kc-3_0.img"),
        ("var-lib-libvirt/images", "kc-3.ISO"),
        ("var-lib-libvirt/images", "base-debian12.qcow2"),
        ("var-lib-libvirt/qemu/nvram", "kc-7_VARS.fd"),
        ("etc-libvirt/qemu", "kc-9.xml"),
        ("etc-libvirt/qemu", "pf-dl-dl-01-0a1b2c3d.xml"),
    ):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
        (tmp_path / sub / name).write_text("")

    assert left_in_dirs(tmp_path, "kc-") == [
        "file var-lib-libvirt/images/kc-3.ISO",
        "file var-lib-libvirt/images/kc-3_0.img",
        "file var-lib-libvirt/qemu/nvram/kc-7_VARS.fd",
        "file etc-libvirt/qemu/kc-9.xml",
    ]
    assert left_in_dirs(tmp_path, "fl-") == []
    assert left_in_dirs(tmp_path / "no-such-host", "kc-") == []


def test_leftover_domains_and_volumes_are_those_with_the_prefix() -> None:
    names = ["kc-1", "pf-dl-dl-00-0a1b2c3d", "kc-10", "kcx"]

    assert named("domain", names, "kc-") == ["domain kc-1", "domain kc-10"]


def test_a_reused_row_is_read_from_the_kept_results_and_not_run(tmp_path: Path) -> None:
    row = next(r for r in ROWS if r.key == "plan")
    kept = result("plan", proxyfleet=[0.2, 0.1, 0.3])
    kept.dump(tmp_path / "plan.json")
    (tmp_path / "plan.seconds").write_text("7\n")
    loaded, seconds = run_row(row, 3, tmp_path, reuse=True)
    assert loaded is not None
    assert loaded.metrics["proxyfleet"].median == 0.2
    assert seconds == 7.0


def test_a_reused_row_without_its_seconds_says_so_instead_of_a_time(tmp_path: Path) -> None:
    row = next(r for r in ROWS if r.key == "plan")
    result("plan", proxyfleet=[0.2]).dump(tmp_path / "plan.json")
    assert run_row(row, 3, tmp_path, reuse=True)[1] is None


def rollout(replaced: list[float] | None, *, wall: float = 853.0, row: str = "rollout") -> Result:
    r = result(row, proxyfleet=[wall], floor=[1693.0], one_vm=[423.0])
    r.add("least_answering", "proxies", [20])
    r.add("proxies", "proxies", [20])
    r.add("max_unavailable", "proxies", [0])
    r.add("batches", "batches", [4])
    if replaced is not None:
        r.add("replaces", "replaces", [20])
        r.add("replaced", "replaces", replaced)
    return r


def test_a_rollout_whose_replaces_all_succeeded_is_judged_by_who_answered() -> None:
    line = rollout_line(rollout([20]))

    assert "20 of 20 replaced" in line[1] and line[3] == "0.50x" and line[5] == "yes"


def test_a_rollout_with_failed_replaces_says_no_and_gives_no_ratio() -> None:
    line = rollout_line(rollout([2]))

    assert "2 of 20 replaced" in line[1] and line[3] == "-" and line[5] == "**no**"


def test_a_rollout_result_that_did_not_count_its_replaces_is_not_taken_as_met() -> None:
    assert rollout_line(rollout(None))[5] == "**no**"


def test_the_dns_row_prints_the_moved_fleets_update_and_says_no_past_one_update_a_run() -> None:
    r = result("dns", **{"first run": [1.5], "rollout run": [3.0, 3.2], "idle run": [0.9]})
    r.add("rollout UPDATE", "bytes", [54318])
    r.add("proxies", "proxies", [200])
    r.add("updates", "messages", [1, 1, 0])
    two = result("dns", **{"first run": [1.5], "rollout run": [3.0], "idle run": [0.9]})
    two.add("rollout UPDATE", "bytes", [54318])
    two.add("proxies", "proxies", [200])
    two.add("updates", "messages", [2])

    line = LINES["dns"](r)[0]

    assert line[0].startswith("8. one run's DNS update of a 200-proxy fleet")
    assert line[1].startswith("3100 (3000-3200) ms, 1 UPDATE of 53 KiB") and line[5] == "yes"
    assert LINES["dns"](two)[0][5] == "**no**"


def test_a_rollout_over_its_floor_by_more_than_the_target_says_no() -> None:
    line = rollout_line(rollout([20], wall=1.2 * 1693.0))

    assert line[3] == "1.20x" and "<= 1.15x" in line[4] and line[5] == "**no**"


def test_healing_during_a_rollout_is_judged_against_two_follow_up_intervals() -> None:
    r = rollout([20], row="rollout-heal")
    r.add("follow_up", "s", [30.0])
    r.add("heal", "s", [61.0])

    heal, during = heal_line(r)

    assert heal[1].startswith("61.0") and heal[5] == "**no**", heal
    assert during[0].startswith("6c. image update rolled over 20 proxies"), during
    r.metrics["heal"] = Metric("heal", "s", [41.0])
    assert heal_line(r)[0][5] == "yes"


def test_a_rollouts_batches_hold_the_surge_rounded_up_and_the_unavailable_rounded_down() -> None:
    assert batches_of(20, "25%", "0") == 4
    assert batches_of(4, "1", "1") == 2
    assert batches_of(3, "10%", "10%") == 3  # surge 1 (up), unavailable 0 (down)
