"""vllm-kimi-eagle compare on the tiny models: two drafts of known different quality on
the same requests, with the chat template and without, against no draft."""

from __future__ import annotations

import json

import pytest

from tests.helpers import docs_bash_block, run_as_written
from vllm_kimi_eagle.fixtures import offline

pytestmark = pytest.mark.engine


def test_compare_ranks_two_drafts_and_shows_the_templates_cost(tiny, tmp_path):
    """The base draft against EAGLE3.1, by the docs' command as written: the ranking, its
    interval, the template's cost, and the per-request figures adding up to the server's
    counters over the same requests. That EAGLE3.1 leads, decided on these requests, is
    the build's promise (margin eagle3.1_over_eagle3, measured on the same requests)."""
    command = docs_bash_block("vllm-kimi-eagle compare", "--tiny-prompts")
    assert (f"--tiny-prompts {offline.COMPARE_PROMPTS} " in command
            and f"--max-tokens {offline.COMPARE_TOKENS} " in command), command
    proc = run_as_written(command, tmp_path)
    out = tmp_path / "out" / "compare"
    report = json.loads((out / "report.json").read_text())
    print("\n" + (out / "report.md").read_text())
    assert (out / "report.png").stat().st_size > 0
    for name in ("draft", "draft-eagle3.1"):
        for variant in ("sent", "raw"):
            figures = report["runs"][name]["variants"][variant]
            assert figures["window"]["drafts"] > 0, (name, variant)  # drafts were proposed
            assert len(figures["requests"]) == offline.COMPARE_PROMPTS
            summary = report["summaries"][f"{name}/{variant}"]
            assert summary["per_request"] and summary["distribution"]["requests"] == 32
            # every request's figures, summed, are the server's counters over the window
            assert summary["consistent"], (summary["summed"], summary["window"])
    assert report["runs"]["no-draft"]["server_args"] == [  # vLLM refuses per-request
        "--seed", "0", "--dtype=float32", "--enforce-eager"]  # figures without a draft
    assert report["runs"]["draft"]["server_args"][-2:] == [
        "--per-request-spec-decode-metrics", "summary"]
    assert all(g["differ"] == [] and g["compared"] == 32 for g in report["greedy"].values())

    (pair,) = report["comparisons"]
    assert pair["settings"] == ["draft", "draft-eagle3.1"]
    assert pair["difference"]["high"] < 0, pair  # EAGLE3.1 accepts more, interval and all
    assert pair["verdict"].startswith("draft-eagle3.1 is higher than draft")
    assert pair["verdict"] in proc.stdout

    cost = report["template_cost"]["draft"]
    print(cost["verdict"])
    # Whether the template costs acceptance is the traffic's business (and the build's):
    # the verdict must say what its interval says.
    difference = cost["difference"]
    assert difference["pairs"] == 32
    assert difference["status"] == ("higher" if difference["low"] > 0 else "lower"
                                    if difference["high"] < 0 else "undecided"), cost
    assert cost["verdict"] in proc.stdout
