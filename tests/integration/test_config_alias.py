"""The kimi_k2 config alias: a DeepSeek-V3 config under Kimi's name, with its MLA
fields required, through transformers and vLLM in fresh processes."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers import probe_engine_config, run_python, write_config_only_models


def test_kimi_k2_config_loads_through_transformers_and_vllm(config_models):
    _, draft = config_models
    result = run_python(
        f"""
        import json
        import vllm_kimi_eagle
        vllm_kimi_eagle.register()
        from transformers import AutoConfig, DeepseekV3Config
        from vllm.transformers_utils.config import get_config
        auto = AutoConfig.from_pretrained({draft!r})
        via_vllm = get_config({draft!r}, trust_remote_code=False)
        plain = DeepseekV3Config(hidden_size=64, num_attention_heads=2)
        print(json.dumps({{
            "auto": [type(auto).__name__, auto.model_type, auto.kv_lora_rank],
            "vllm": [type(via_vllm).__name__, via_vllm.model_type, via_vllm.qk_rope_head_dim],
            "deepseek_v3_type": [DeepseekV3Config.model_type, plain.model_type],
        }}))
        """
    )
    assert result["auto"] == ["KimiK2Config", "kimi_k2", 512]
    assert result["vllm"] == ["KimiK2Config", "kimi_k2", 64]
    assert result["deepseek_v3_type"] == ["deepseek_v3", "deepseek_v3"]


def test_deepseek_v3_config_is_unaffected(tmp_path):
    path = tmp_path / "ds"
    path.mkdir()
    (path / "config.json").write_text(
        json.dumps({"model_type": "deepseek_v3", "hidden_size": 64, "num_attention_heads": 2})
    )
    result = run_python(
        f"""
        import json
        import vllm_kimi_eagle
        vllm_kimi_eagle.register()
        from vllm.transformers_utils.config import get_config
        config = get_config({str(path)!r}, trust_remote_code=False)
        print(json.dumps({{"cls": type(config).__name__, "type": config.model_type}}))
        """
    )
    assert (result["cls"], result["type"]) == ("DeepseekV3Config", "deepseek_v3")


@pytest.mark.parametrize("field", ["kv_lora_rank", "qk_rope_head_dim"])
def test_kimi_k2_config_without_mla_field_names_file_and_field(tmp_path, field):
    target, draft = write_config_only_models(str(tmp_path), draft_overrides={field: None})
    result = probe_engine_config(target, draft)
    config_json = os.path.join(draft, "config.json")
    assert config_json in result["error"] and repr(field) in result["error"], result["error"]

    from transformers import AutoConfig

    from vllm_kimi_eagle.config_alias import KimiConfigError, register_config_alias

    register_config_alias()
    with pytest.raises(KimiConfigError, match=f"{config_json}.*'{field}'"):
        AutoConfig.from_pretrained(draft)
