"""The plugin package: discovery, register(), the kimi_k2 alias, MLA detection (issue 2).

Real vLLM throughout; anything that compares "plugin" with "no plugin" runs each side in a
fresh process (helpers.run_python), because registrations live in the process.
"""

from __future__ import annotations

import importlib.metadata
import json
import os

import pytest
from packaging.version import Version

from tests.helpers import probe_engine_config, run_python, write_config_only_models
from vllm_kimi_eagle import DRAFT_ARCHITECTURES, vllm_compat


@pytest.fixture(scope="module")
def config_models(tmp_path_factory):
    return write_config_only_models(str(tmp_path_factory.mktemp("config-only")))


def test_entry_point_is_installed():
    points = importlib.metadata.entry_points(group="vllm.general_plugins")
    ours = [p for p in points if p.value == "vllm_kimi_eagle:register"]
    assert len(ours) == 1, [p.value for p in points]
    assert ours[0].load().__name__ == "register"


RESOLVE = """
import json, sys, torch
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm import ModelRegistry
found = {}
for arch in %r:
    cls = ModelRegistry._try_load_model_cls(arch)
    found[arch] = f"{cls.__module__}:{cls.__name__}"
print(json.dumps({"classes": found, "cuda_initialized": torch.cuda.is_initialized()}))
"""


@pytest.mark.parametrize(
    "env, module",
    [
        ({}, "vllm_kimi_eagle.draft_model"),
        ({"VLLM_KIMI_EAGLE_DRAFT": "upstream"}, "vllm.model_executor.models.deepseek_eagle3"),
        ({"VLLM_PLUGINS": ""}, "vllm.model_executor.models.deepseek_eagle3"),
    ],
    ids=["plugin", "draft=upstream", "plugins-disabled"],
)
def test_model_registry_resolves_draft_architectures(env, module):
    result = run_python(RESOLVE % (DRAFT_ARCHITECTURES,), env=env)
    for arch in DRAFT_ARCHITECTURES:
        assert result["classes"][arch].startswith(module + ":"), result["classes"]
    assert result["cuda_initialized"] is False


def test_register_twice_is_harmless_and_imports_no_model_code():
    result = run_python(
        """
        import json, sys
        import vllm_kimi_eagle
        vllm_kimi_eagle.register()
        from vllm.transformers_utils.model_arch_config_convertor import (
            ModelArchConfigConvertorBase as C)
        first = C.is_deepseek_mla
        vllm_kimi_eagle.register()
        vllm_kimi_eagle._registered = False  # force the body to run again
        vllm_kimi_eagle.register()
        from vllm import ModelRegistry
        print(json.dumps({
            "same_check": C.is_deepseek_mla is first,
            "wrapped_once": not hasattr(C.is_deepseek_mla.__wrapped__, "__wrapped__"),
            "draft_module_imported": "vllm_kimi_eagle.draft_model" in sys.modules,
            "registered": ModelRegistry.models["Eagle3DeepseekV2ForCausalLM"].module_name,
        }))
        """
    )
    assert result["same_check"] and result["wrapped_once"]
    assert result["draft_module_imported"] is False  # lazy "module:Class" registration
    assert result["registered"] == "vllm_kimi_eagle.draft_model"


def test_bad_draft_choice_names_the_variable():
    from vllm_kimi_eagle import draft_choice

    with pytest.raises(ValueError, match="VLLM_KIMI_EAGLE_DRAFT='tree'.*upstream"):
        draft_choice({"VLLM_KIMI_EAGLE_DRAFT": "tree"})
    assert draft_choice({}) == "plugin"
    assert draft_choice({"VLLM_KIMI_EAGLE_DRAFT": "UPSTREAM"}) == "upstream"


@pytest.mark.parametrize(
    "version, acts, says",
    [
        (None, False, "no vLLM is importable"),
        (Version("0.10.2"), False, "older than 0.18.1"),
        (Version("0.18.1"), True, ""),
        (Version("0.32.0"), True, ""),
        (Version("0.33.0"), True, ""),
        (Version("0.34.0"), True, "newer than 0.33.0"),
    ],
)
def test_support_verdict(version, acts, says):
    act, message = vllm_compat.support_verdict(version)
    assert act is acts
    assert (says in message) if says else message == ""


def test_old_vllm_gets_one_warning_and_no_changes():
    result = run_python(
        """
        import json, logging
        from packaging.version import Version
        import vllm_kimi_eagle
        from vllm_kimi_eagle import vllm_compat
        records = []
        class Keep(logging.Handler):
            def emit(self, record): records.append(record.getMessage())
        logging.getLogger("vllm.vllm_kimi_eagle").addHandler(Keep())
        vllm_compat.installed_vllm_version = lambda: Version("0.17.0")
        vllm_kimi_eagle.register()
        vllm_kimi_eagle.register()
        from vllm import ModelRegistry
        from vllm.transformers_utils.config import _CONFIG_REGISTRY
        from vllm.transformers_utils.model_arch_config_convertor import (
            ModelArchConfigConvertorBase as C)
        print(json.dumps({
            "warnings": records,
            "draft_module": ModelRegistry.models["Eagle3DeepseekV2ForCausalLM"].module_name,
            "kimi_class": _CONFIG_REGISTRY["kimi_k2"].__name__,
            "mla_wrapped": hasattr(C.is_deepseek_mla, "__wrapped__"),
        }))
        """,
        env={"VLLM_PLUGINS": ""},
    )
    assert len(result["warnings"]) == 1 and "0.17.0" in result["warnings"][0]
    assert result["draft_module"] == "vllm.model_executor.models.deepseek_eagle3"
    assert result["kimi_class"] == "DeepseekV3Config"
    assert result["mla_wrapped"] is False


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


def test_wrapped_draft_config_override_keeps_vllms_contract():
    """The SpecForge wrapper over SpeculativeConfig.hf_config_override stays a static
    method, picklable by reference (vLLM ships it to engine processes), and takes every
    argument the original takes (0.33 adds transformers_mtp_overrides)."""
    result = run_python(
        """
        import inspect, json, pickle
        import vllm_kimi_eagle
        vllm_kimi_eagle.register()
        from vllm.config.speculative import SpeculativeConfig as S
        from transformers import PretrainedConfig
        wrapper = S.hf_config_override
        original = wrapper.__wrapped__
        params = [p for p in inspect.signature(original).parameters.values()]
        call = inspect.signature(wrapper).bind(*[None] * len(params))
        config = PretrainedConfig(architectures=["LlamaForCausalLM"])
        print(json.dumps({
            "wrapped": wrapper is not original,
            "static": isinstance(inspect.getattr_static(S, "hf_config_override"), staticmethod),
            "pickled_by_reference": pickle.loads(pickle.dumps(wrapper)) is wrapper,
            "binds_all_params": len(call.args) == len(params),
            # as 0.33 calls it: positionally, or by keyword through functools.partial
            "takes_033_calls": bool(inspect.signature(wrapper, follow_wrapped=False).bind(config, None))
                and bool(inspect.signature(wrapper, follow_wrapped=False).bind(
                    config, transformers_mtp_overrides=None)),
            "same_result": wrapper(config).to_dict() == original(config).to_dict(),
        }))
        """
    )
    for key in ("wrapped", "static", "pickled_by_reference", "binds_all_params",
                "takes_033_calls", "same_result"):
        assert result[key] is True, (key, result)
