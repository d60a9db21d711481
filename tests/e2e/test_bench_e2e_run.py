"""bench-e2e's smallest real grid: two servers, one window each (its
decisions on made-up windows: tests/unit/test_bench_e2e.py)."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import run_cli
from vllm_kimi_eagle.tools.bench_e2e.grid import NONE, PLUGIN
from vllm_kimi_eagle.tools.bench_e2e.k_schedule import GOAL

pytestmark = pytest.mark.engine


def test_smallest_real_run_writes_cells_chart_verdict_and_schedule(tiny, tmp_path):
    """Two real servers (no speculation, plugin at k=1), one window each, then --schedule:
    the derived schedule's server and the all-zero schedule's, one window each. On the
    six-layer target: the command's default, the 61-layer Kimi-cost target, starts each
    server in minutes here (its run: tests/e2e/test_kimi_cost_e2e.py). Four prompts of 32
    tokens a window: a window much shorter than a second can end between two polls of
    /metrics (every 0.1 s), which the command then refuses to measure."""
    proc = run_cli("bench-e2e", "--target", os.path.join(tiny, "target"),
                   "--draft", os.path.join(tiny, "draft"), "--server-args=--enforce-eager",
                   "--k", "1", "--concurrency", "1", "--repeats", "1",
                   "--configs", "none,plugin", "--max-tokens", "32", "--prompts", "4",
                   "--schedule", "--out", str(tmp_path), timeout=1800)
    print(proc.stdout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    report = json.loads((tmp_path / "bench-e2e.json").read_text())
    cells = {c["config"]: c for c in report["cells"]}
    assert set(cells) == {NONE, PLUGIN} and all(c["repeats"] == 1 for c in cells.values())
    plugin, none = cells[PLUGIN], cells[NONE]
    assert plugin["drafts"] > 0 and none["drafts"] == 0
    assert 1.0 <= plugin["acceptance_length"] <= 2.0
    assert len(plugin["acceptance_by_position"]) == 1
    assert 0.0 <= plugin["acceptance_by_position"][0] <= 1.0
    assert plugin["tokens_per_s"]["median"] > 0 and plugin["time_per_output_token_ms"]["median"] > 0
    # One client thread: the server's mean batch (requests sampled per step) is one.
    assert none["batch"] == pytest.approx(1.0, abs=0.05)
    assert plugin["batch"] == pytest.approx(1.0, abs=0.05)
    assert plugin["speedup"] == pytest.approx(
        plugin["tokens_per_s"]["median"] / none["tokens_per_s"]["median"], rel=0.01)
    # Every request's own acceptance (vLLM's per-request figures), on the speculating
    # server only; one window of 4 requests, whose steps are the cell's counters.
    assert none["per_request"] is None
    assert plugin["per_request"]["requests"] == len(plugin["per_request"]["acceptance_lengths"]) == 4
    assert plugin["per_request"]["p10"] <= plugin["per_request"]["p50"] <= plugin["per_request"]["p90"]
    assert report["server_args"] == ["--seed", "0", "--enforce-eager"]
    assert (tmp_path / "bench-e2e.png").stat().st_size > 10_000
    assert "best k at concurrency 1:" in proc.stdout and "elapsed" in proc.stdout
    assert "bench-e2e windows" in proc.stderr  # progress
    # --schedule: derived from what was measured, served, and the all-zero schedule's cost
    # measured beside it (the bench stops where a window drafts against its rule).
    summary = json.loads((tmp_path / "summary.json").read_text())
    (row,) = summary["per_concurrency"]
    assert row["concurrency"] == 1 and row["batch"] == pytest.approx(1.0, abs=0.05)
    assert row["none_tok_s"] > 0 and row["schedule_tok_s"] > 0
    assert row["all_zero_schedule_tok_s"] > 0 and row["all_zero_schedule_over_none"] > 0
    # Which verdict and which schedule depend on the speeds measured: each must be the one
    # those speeds give.
    assert "schedule / max(none, fixed)" in proc.stdout
    assert row["status"] == ("PASS" if row["schedule_over_best"] >= GOAL else "FAIL"), row
    spec = summary["speculative_config"]
    assert (spec is None) == (row["best_fixed_k"] == 0), (row, spec)
    if spec is None:  # no k beat no speculation: served and advised without a draft
        assert summary["schedule"] == [[1, 1024, 0]] and not (tmp_path / "schedule.json").exists()
        assert "serve without a draft" in proc.stdout
    else:
        assert json.loads((tmp_path / "schedule.json").read_text()) == spec
        assert spec["num_speculative_tokens_per_batch_size"] == summary["schedule"]
