"""vllm-kimi-eagle bench-sampler: the greedy shortcut's three paths, timed."""

from __future__ import annotations

import json

from tests.helpers import run_cli
from vllm_kimi_eagle.compat import vllm_compat


def test_bench_sampler_command_prints_rows():
    """The benchmark runs its three paths (small sizes here; figures printed, not asserted)."""
    proc = run_cli("bench-sampler", "--hidden", "64", "--target-vocab", "4096",
                   "--draft-vocabs", "4096,1000", "--batches", "1,16", "--repeats", "2",
                   "--json", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == 2 * 2 * 2
    has_upstream = vllm_compat.local_argmax_mixin() is not None
    for row in rows:
        assert {"draft_vocab", "target_vocab", "batch", "part", "plain_ms", "shortcut_ms",
                "ratio", "upstream_local_ms", "ratio_vs_upstream_local"} <= set(row)
        assert row["same_tokens"] is True
        assert (row["upstream_local_ms"] is not None) is has_upstream, row
    pruned = [r for r in rows if r["draft_vocab"] == 1000 and r["part"] == "sampling"]
    print("\n" + "\n".join(json.dumps(r) for r in pruned))
    assert all(r["shortcut_extra_mb"] < r["plain_extra_mb"] for r in pruned)
