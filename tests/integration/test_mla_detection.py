"""MLA detection for kimi_k2 drafts (vLLM issue #45760): vLLM's
create_engine_config() with and without the plugin, each in a fresh process."""

from __future__ import annotations

import pytest

from tests.helpers import probe_engine_config, write_config_only_models


def test_kimi_k2_draft_is_mla_with_plugin_and_not_without(config_models):
    target, draft = config_models
    with_plugin = probe_engine_config(target, draft)
    upstream = probe_engine_config(target, draft, env={"VLLM_PLUGINS": ""})
    print(f"\ndraft use_mla: plugin={with_plugin['use_mla']} upstream={upstream['use_mla']}")
    assert with_plugin["inner_model_type"] == "kimi_k2"
    assert with_plugin["use_mla"] is True
    assert upstream["use_mla"] is False  # vLLM issue #45760: the plugin is what fixes it
    assert with_plugin["target_use_mla"] is upstream["target_use_mla"] is True


@pytest.mark.parametrize(
    "overrides, mla",
    [
        ({"model_type": "deepseek_v2"}, True),
        ({"model_type": "llama", "architectures": ["LlamaForCausalLMEagle3"],
          "kv_lora_rank": None, "q_lora_rank": None, "head_dim": 64}, False),
    ],
    ids=["deepseek_v2-draft", "llama-draft"],
)
def test_other_drafts_keep_vllms_answer(tmp_path, overrides, mla):
    target, draft = write_config_only_models(str(tmp_path), draft_overrides=overrides)
    assert probe_engine_config(target, draft)["use_mla"] is mla
    assert probe_engine_config(target, draft, env={"VLLM_PLUGINS": ""})["use_mla"] is mla
