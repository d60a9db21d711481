"""What a fresh vLLM process makes of the plugin: which class serves the draft
architectures, register() run twice, an unsupported vLLM release. Each check runs in its
own interpreter (helpers.run_python), because registrations live in the process.
"""

from __future__ import annotations

import pytest

from tests.helpers import run_python
from vllm_kimi_eagle.architectures import DRAFT_ARCHITECTURES


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
