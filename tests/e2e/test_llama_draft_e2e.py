"""A Llama-architecture EAGLE3 draft of the Kimi target, as TorchSpec's Kimi-K2.5 recipe
makes one (LlamaForCausalLMEagle3, vLLM's own class serves it): trained on the target's
layers [2, 3, 5] in vLLM's numbering, its config writes them as its trainer does,
output-of ([1, 2, 4]). The plugin reads them back to the layers it was trained on and the
draft serves at the acceptance the reference computes for the same sequences; vLLM alone
reads them verbatim. k=3.

bfloat16 on a CPU with AMX, skipped elsewhere: vLLM's CPU build serves an MLA target with a
non-MLA draft only where the two attention backends share a KV block size. AMX_MLA
(bfloat16 only) does, with the draft's CPU_ATTN; CPU_MLA, which float32 needs, does not
("No common block size"), with the plugin or without it (docs/troubleshooting.md)."""

from __future__ import annotations

import os

import pytest

from tests.helpers import (
    NO_PLUGIN,
    engine,
    reference_draft,
    served,
    served_sequences,
    tiny_target,
)
from vllm_kimi_eagle.cpu_mla_backend import amx_available
from vllm_kimi_eagle.fixtures.offline import served_acceptance
from vllm_kimi_eagle.fixtures.variants import AUX_LAYER_IDS, LLAMA_DRAFT

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(not amx_available(), reason="an MLA target with a non-MLA draft needs "
                       "AMX_MLA (bfloat16, a CPU with AMX) on vLLM's CPU build"),
]
AS_TRAINED = 0.99
BF16 = {"dtype": "bfloat16"}


def test_a_llama_draft_reads_the_layers_it_was_trained_on(tiny):
    ours = served(engine(tiny, LLAMA_DRAFT, **BF16))
    alone = served(engine(tiny, LLAMA_DRAFT, env=NO_PLUGIN, **BF16))
    reference, spec = reference_draft(os.path.join(tiny, LLAMA_DRAFT))
    trained = served_acceptance(tiny_target(tiny), reference, served_sequences(ours),
                                AUX_LAYER_IDS)
    print(f"\n{LLAMA_DRAFT}: plugin {ours['acceptance_length']} (as trained {trained:.4f}), "
          f"vLLM alone {alone['acceptance_length']}")
    assert spec.attention == "gqa"
    assert ours["drafts"] > 0 and alone["drafts"] > 0, "no draft proposed"
    assert ours["token_ids"] == alone["token_ids"] == served(engine(tiny, None, **BF16))["token_ids"]
    assert ours["draft_class"].startswith("vllm.model_executor.models.llama_eagle3:")
    assert "vLLM will capture the inputs of layers [2, 3, 5]" in ours["_log"]
    assert ours["acceptance_length"] >= AS_TRAINED * trained
    assert alone["acceptance_length"] < ours["acceptance_length"]
