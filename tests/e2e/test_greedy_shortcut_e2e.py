"""The greedy argmax shortcut served: no token and no acceptance changes, on one
rank and across two tensor-parallel ranks (the paths compared: tests/unit/test_top_tokens.py)."""

from __future__ import annotations

import pytest

from tests.helpers import MAX_TOKENS, PROMPTS, engine, served

pytestmark = pytest.mark.engine


SHORTCUT_OFF = {"VLLM_KIMI_EAGLE_GREEDY_SHORTCUT": "0"}
# vLLM's own proposer logs this when it calls the draft's get_top_tokens (V1 and V2).
VLLM_LOCAL_ARGMAX_LINE = "Using local argmax reduction for draft token generation"


@pytest.mark.parametrize("draft", ["draft", "draft-pruned"])
def test_shortcut_changes_no_token_and_no_acceptance(tiny, draft):
    on = served(engine(tiny, draft))
    off = served(engine(tiny, draft, env=SHORTCUT_OFF))
    assert on["drafts"] > 0 and off["drafts"] > 0
    print(
        f"\n{draft}: acceptance shortcut {on['acceptance_length']} / plain path "
        f"{off['acceptance_length']}; tokens/s (tiny, CPU, one run each, noisy) plugin "
        f"{on['tokens_per_s']} / plain {off['tokens_per_s']}"
    )
    assert VLLM_LOCAL_ARGMAX_LINE in on["_log"] and VLLM_LOCAL_ARGMAX_LINE not in off["_log"]
    assert on["token_ids"] == off["token_ids"]
    assert on["drafts"] == off["drafts"]
    assert on["acceptance_length"] == off["acceptance_length"]
    assert on["acceptance_by_position"] == off["acceptance_by_position"]


def test_tensor_parallel_2_shortcut_is_exact(tiny):
    """TP=2 on one CPU (each worker on its own core), fp32: the shortcut's cross-rank
    reduction against the plain path's full-vocabulary logits, nothing else changed."""
    env = {"VLLM_CPU_OMP_THREADS_BIND": "0|1", "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"}
    tp = dict(tensor_parallel_size=2, dtype="float32")
    on = served(engine(tiny, "draft-pruned", env=env, replicated_checksums=True, **tp))
    off = served(engine(tiny, "draft-pruned", env={**env, **SHORTCUT_OFF}, **tp))
    assert on["drafts"] > 0 and off["drafts"] > 0
    print(f"\nTP=2 fp32, shortcut on: acceptance {on['acceptance_length']} "
          f"{on['acceptance_by_position']}; off: {off['acceptance_length']} "
          f"{off['acceptance_by_position']} ({len(PROMPTS)} prompts x {MAX_TOKENS} tokens)")
    assert VLLM_LOCAL_ARGMAX_LINE in on["_log"] and VLLM_LOCAL_ARGMAX_LINE not in off["_log"]
    assert on["token_ids"] == off["token_ids"]
    assert (on["drafts"], on["accepted_tokens"]) == (off["drafts"], off["accepted_tokens"])
    assert on["acceptance_by_position"] == off["acceptance_by_position"]
    ranks = on["replicated_checksums"]
    assert len(ranks) == 2 and ranks[0] == ranks[1], ranks
