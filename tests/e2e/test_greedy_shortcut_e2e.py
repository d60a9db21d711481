"""The greedy argmax shortcut served: no token and no acceptance changes, on one
rank and across two tensor-parallel ranks (the paths compared: tests/unit/test_top_tokens.py).

Each comparison runs in one engine, one variable apart: the same greedy chats on the
shortcut and then on vLLM's plain path (logits over the target vocabulary, argmax),
switched in vLLM's proposer between the two (engine_run.py, "both_draft_paths"). That the
plugin turns the shortcut on, and that VLLM_KIMI_EAGLE_GREEDY_SHORTCUT=0 or the user's
speculative config keeps it off, is decided when vLLM builds its config:
tests/integration/test_shortcut_policy_config.py.
"""

from __future__ import annotations

import pytest

from tests import engines
from tests.helpers import MAX_TOKENS, PROMPTS, engine, served

pytestmark = pytest.mark.engine


# Both paths are a job of these drafts' shared engines, after their standard job.
DRAFTS = {name: engines.named(name) for name in ("draft", "draft-pruned")}
TP2 = engines.named("draft-pruned@tp2")
# vLLM's own proposer logs this when it calls the draft's get_top_tokens (V1 and V2).
VLLM_LOCAL_ARGMAX_LINE = "Using local argmax reduction for draft token generation"


def paths(run: dict) -> tuple[dict, dict]:
    """The shortcut's and the plain path's chats of a both_draft_paths job, each checked to
    have taken its path."""
    on, off = run["shortcut"], run["plain"]
    assert all(run["started_on_shortcut"]), "the engine did not start on the shortcut"
    assert VLLM_LOCAL_ARGMAX_LINE in run["_log"]
    assert on["drafts"] > 0 and off["drafts"] > 0
    # Every draft step of the first took the shortcut, none of the second.
    assert on["top_token_calls"] > 0 and off["top_token_calls"] == 0, (on, off)
    return on, off


@pytest.mark.parametrize("draft", ["draft", "draft-pruned"])
def test_shortcut_changes_no_token_and_no_acceptance(tiny, draft):
    on, off = paths(served(engine(tiny, DRAFTS[draft], "both_paths")))
    print(
        f"\n{draft}: acceptance shortcut {on['acceptance_length']} / plain path "
        f"{off['acceptance_length']} ({on['top_token_calls']} shortcut calls); tokens/s "
        f"(tiny, CPU, one run each, noisy) shortcut {on['tokens_per_s']} / plain "
        f"{off['tokens_per_s']}"
    )
    assert on["token_ids"] == off["token_ids"]
    assert on["drafts"] == off["drafts"]
    assert on["acceptance_length"] == off["acceptance_length"]
    assert on["acceptance_by_position"] == off["acceptance_by_position"]


def test_tensor_parallel_2_shortcut_is_exact(tiny):
    """TP=2 on one CPU (each worker on its own core), fp32: the shortcut's cross-rank
    reduction against the plain path's full-vocabulary logits, nothing else changed."""
    run = served(engine(tiny, TP2, "both_paths_checksums"))
    on, off = paths(run)
    print(f"\nTP=2 fp32, shortcut on: acceptance {on['acceptance_length']} "
          f"{on['acceptance_by_position']}; off: {off['acceptance_length']} "
          f"{off['acceptance_by_position']} ({len(PROMPTS)} prompts x {MAX_TOKENS} tokens)")
    assert on["token_ids"] == off["token_ids"]
    assert (on["drafts"], on["accepted_tokens"]) == (off["drafts"], off["accepted_tokens"])
    assert on["acceptance_by_position"] == off["acceptance_by_position"]
    ranks = run["replicated_checksums"]
    assert len(ranks) == 2 and ranks[0] == ranks[1], ranks
    # Each rank's worker checked what vLLM built against the plan (serving/self_check.py).
    for rank in (0, 1):
        assert f"self-check (tp{rank}): vLLM enacted what the plugin decided" in run["_log"]
