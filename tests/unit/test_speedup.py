"""Speedups from two measured runs, checked against the server's own figure (eval and
bench-e2e both report them)."""

from __future__ import annotations

from vllm_kimi_eagle.tools.figures.speedup import speedups


def test_speedups_flag_disagreement():
    def run(tokens_per_s, tpot):
        return {"tokens_per_s": tokens_per_s, "mean_time_per_output_token_ms": tpot}

    agree = speedups(run(100, 10.0), run(130, 8.0))
    assert agree["speedup_generation"] == 1.3 and agree["speedup_time_per_output_token"] == 1.25
    assert agree["consistent"] is True
    disagree = speedups(run(100, 6.02), run(179.3, 6.17))  # figures an earlier eval reported
    assert disagree["consistent"] is False
    assert speedups(run(100, None), run(130, 8.0))["consistent"] is False
