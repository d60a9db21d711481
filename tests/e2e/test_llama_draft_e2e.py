"""A Llama-architecture EAGLE3 draft of the Kimi target, as TorchSpec's Kimi-K2.5 recipe
makes one (LlamaForCausalLMEagle3, vLLM's own class serves it): trained on the target's
layers [2, 3, 5] in vLLM's numbering, its config writes them as its trainer does,
output-of ([1, 2, 4]). The plugin reads them back to the layers it was trained on and the
draft serves at the acceptance the reference computes for the same sequences; vLLM alone
reads them verbatim. k=3.

bfloat16 on a CPU with AMX: vLLM's CPU build serves an MLA target with a non-MLA draft only
where the two attention backends share a KV block size. AMX_MLA (bfloat16 only) does, with
the draft's CPU_ATTN; CPU_MLA, which float32 and CPUs without AMX need, does not ("No
common block size"), with the plugin or without it (docs/troubleshooting.md). Without AMX
its twin checks what can be checked there: the layers captured, and that refusal."""

from __future__ import annotations

import os

import pytest

from tests import engines
from tests.helpers import (
    PROMPTS,
    engine,
    probe_engine_config,
    reference_draft,
    served,
    served_sequences,
    tiny_target,
)
from vllm_kimi_eagle.cpu.cpu_mla_backend import amx_available
from vllm_kimi_eagle.fixtures.offline import served_acceptance
from vllm_kimi_eagle.fixtures.variants import AUX_LAYER_IDS, LLAMA_DRAFT

pytestmark = pytest.mark.engine
OURS, ALONE, PLAIN, REFUSED = (engines.named(n) for n in (
    f"{LLAMA_DRAFT}@bf16", f"{LLAMA_DRAFT}@bf16+no-plugin", "none@bf16", LLAMA_DRAFT))
NEEDS_AMX = pytest.mark.skipif(not amx_available(), reason="an MLA target with a non-MLA "
                               "draft needs AMX_MLA (bfloat16, a CPU with AMX) on vLLM's CPU "
                               "build; its twin without AMX runs instead")
# bfloat16 against the float32 reference: acceptance in bfloat16 is float32's within 0.2%
# on the base draft (docs/measurements.md, CPUs with AMX), and an answer may flip where
# the no-draft server's own answer flips when only its batch changes (1 in 48 there).
BF16_AS_TRAINED = 0.97
BF16_FLIPS = 1


@NEEDS_AMX
def test_a_llama_draft_reads_the_layers_it_was_trained_on(tiny):
    ours = served(engine(tiny, OURS))
    alone = served(engine(tiny, ALONE))
    plain = served(engine(tiny, PLAIN))
    reference, spec = reference_draft(os.path.join(tiny, LLAMA_DRAFT))
    trained = served_acceptance(tiny_target(tiny), reference, served_sequences(ours),
                                AUX_LAYER_IDS)
    same = sum(a == b for a, b in zip(ours["token_ids"], plain["token_ids"]))
    print(f"\n{LLAMA_DRAFT}, bfloat16: plugin {ours['acceptance_length']} (as trained "
          f"{trained:.4f}), vLLM alone {alone['acceptance_length']}; {same} of "
          f"{len(PROMPTS)} answers the no-draft server's")
    assert spec.attention == "gqa"
    assert ours["drafts"] > 0 and alone["drafts"] > 0, "no draft proposed"
    assert ours["draft_class"].startswith("vllm.model_executor.models.llama_eagle3:")
    assert "vLLM will capture the inputs of layers [2, 3, 5]" in ours["_log"]
    assert same >= len(PROMPTS) - BF16_FLIPS
    assert ours["acceptance_length"] >= BF16_AS_TRAINED * trained
    assert alone["acceptance_length"] < ours["acceptance_length"]


@pytest.mark.skipif(amx_available(), reason="a CPU with AMX serves the Llama draft (above)")
def test_without_amx_the_layers_are_resolved_and_the_pairing_refused_by_vllm(tiny):
    """The twin on CPUs without AMX: the plugin resolves the Llama draft's ids to the layers
    it was trained on; the engine then stops at vLLM's own KV-cache check, which no MLA
    target with a non-MLA draft passes on CPU_MLA (the reason for the AMX test's skip)."""
    config = probe_engine_config(os.path.join(tiny, "target"), os.path.join(tiny, LLAMA_DRAFT))
    assert config["top_level_layer_ids"] == AUX_LAYER_IDS, config
    assert config["use_mla"] is False and config["target_use_mla"] is True
    refused = engine(tiny, REFUSED)
    assert "No common block size" in refused.get("error", "") + refused["_stderr"], \
        refused.get("error", "served")
