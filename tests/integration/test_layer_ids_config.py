"""Layer ids through real create_engine_config() (no weights): the plugin's decision is what
vLLM captures (the decision itself: tests/unit/test_layer_ids.py)."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import probe_engine_config, write_config_only_models
from vllm_kimi_eagle.draft.layer_ids import CONVENTION_ENV


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}}, [2, 3, 5]),
        ({"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 3, 5]}}, [2, 3, 5]),
        ({"eagle_aux_hidden_state_layer_ids": [1, 2, 4], "eagle_config": {}}, [2, 3, 5]),
    ],
    ids=["nested-output-of", "nested-input-of", "top-level-output-of"],
)
def test_engine_config_carries_resolved_top_level_ids(tmp_path, overrides, expected):
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=overrides)
    result = probe_engine_config(target, draft)
    assert result["top_level_layer_ids"] == expected, result
    assert f"vLLM will capture the inputs of layers {expected}" in result["_log"]


def test_engine_config_without_plugin_keeps_ids_nested(tmp_path):
    overrides = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}}
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=overrides)
    assert probe_engine_config(target, draft, env={"VLLM_PLUGINS": ""})[
        "top_level_layer_ids"
    ] is None


LLAMA_DRAFT = {
    "model_type": "llama", "architectures": ["LlamaForCausalLMEagle3"], "kv_lora_rank": None,
    "q_lora_rank": None, "head_dim": 64, "num_key_value_heads": 4,
    "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4]},
}


def test_llama_draft_for_kimi_target_gets_the_same_handling(tmp_path):
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=LLAMA_DRAFT)
    assert probe_engine_config(target, draft)["top_level_layer_ids"] == [2, 3, 5]


def test_other_families_are_left_alone_unless_asked(tmp_path):
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=LLAMA_DRAFT)
    with open(os.path.join(target, "config.json")) as f:
        config = json.load(f)
    llama = {k: config[k] for k in ("vocab_size", "hidden_size", "intermediate_size",
                                    "num_hidden_layers", "num_attention_heads",
                                    "num_key_value_heads", "rms_norm_eps", "max_position_embeddings")}
    with open(os.path.join(target, "config.json"), "w") as f:
        json.dump(dict(llama, model_type="llama", architectures=["LlamaForCausalLM"]), f)
    assert probe_engine_config(target, draft)["top_level_layer_ids"] is None
    asked = probe_engine_config(target, draft, env={CONVENTION_ENV: "output-of"})
    assert asked["top_level_layer_ids"] == [2, 3, 5]


def test_out_of_range_ids_fail_in_create_engine_config(tmp_path):
    overrides = {"eagle_config": {"eagle_aux_hidden_state_layer_ids": [2, 3, 9]}}
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=overrides)
    result = probe_engine_config(target, draft)
    assert "error" in result
    assert "[2, 3, 9]" in result["error"] and "6 layers" in result["error"]
