"""The MLA backend vLLM's CPU platform gives the target and the draft, with the plugin and
without it (vllm_kimi_eagle/cpu/cpu_mla_backend.py): create_engine_config() and then vLLM's own
selector (CpuPlatform.get_attn_backend_cls), each in a fresh process, with vLLM's AMX probe
forced on or off so that the choice on a CPU with AMX is tested on every machine. (Served
for real on AMX hardware by every float32 engine test there.)"""

from __future__ import annotations

import pytest

from tests.helpers import NO_PLUGIN, run_python

# The line a config gets when the plugin moves a model off AMX_MLA (the load line names
# the mend in other words, in every process where it is installed).
PER_CONFIG_LINE = "which vLLM picks on this CPU with AMX, cannot serve"

PROBE = """
import json
import torch
torch.cpu._is_amx_tile_supported = lambda: {amx}  # vLLM's AMX probe, forced
from vllm.engine.arg_utils import EngineArgs
from vllm.platforms.cpu import CpuPlatform
from vllm.v1.attention.selector import AttentionSelectorConfig

spec = {{"method": "eagle3", "model": {draft!r}, "num_speculative_tokens": 3, **{spec_extra!r}}}
config = EngineArgs(model={target!r}, speculative_config=spec, max_model_len=256,
                    **{engine_extra!r}).create_engine_config()

def picked(model_config, chosen):
    selector = AttentionSelectorConfig(
        head_size=model_config.get_head_size(), dtype=model_config.dtype,
        kv_cache_dtype=None, block_size=config.cache_config.block_size, use_mla=True)
    return CpuPlatform.get_attn_backend_cls(chosen, selector).rsplit(".", 1)[-1]

draft = config.speculative_config.draft_model_config
print(json.dumps({{
    "target": picked(config.model_config, config.attention_config.backend),
    "draft": picked(draft, config.speculative_config.attention_backend),
    "block_size": config.cache_config.block_size,
}}))
"""


def choice(models, amx: bool, env=None, spec_extra=None, **engine_extra) -> dict:
    target, draft = models
    return run_python(PROBE.format(amx=amx, target=target, draft=draft,
                                   spec_extra=spec_extra or {}, engine_extra=engine_extra),
                      env=env)


@pytest.fixture(scope="module")
def models(config_models):
    """The config-only models, on a vLLM that has the AMX_MLA backend (0.32 on)."""
    import importlib

    from vllm_kimi_eagle.compat import vllm_compat

    module, name = vllm_compat.ATTENTION_BACKEND_ENUM
    if not hasattr(getattr(importlib.import_module(module), name), vllm_compat.AMX_MLA_NAME):
        pytest.skip("this vLLM release has no AMX_MLA backend: its CPU platform always "
                    "picks CPU_MLA")
    return config_models


def test_float32_on_amx_gets_cpu_mla_for_target_and_draft(models):
    ours = choice(models, amx=True, dtype="float32")
    vllms = choice(models, amx=True, dtype="float32", env=NO_PLUGIN)
    print(f"\nfloat32 on AMX: plugin {ours}, vLLM alone {vllms}")
    assert vllms["target"] == vllms["draft"] == "AMXMLABackend"  # cannot load float32
    assert ours["target"] == ours["draft"] == "CPUMLABackend"
    assert ours["block_size"] == 16  # what CPU_MLA's decode kernel is built for
    assert "AMX_MLA, which vLLM picks on this CPU with AMX, cannot serve the target " \
           "(dtype float32) and the draft" in ours["_log"]


def test_bfloat16_on_amx_keeps_amx_mla(models):
    ours = choice(models, amx=True, dtype="bfloat16")
    vllms = choice(models, amx=True, dtype="bfloat16", env=NO_PLUGIN)
    assert ours["target"] == ours["draft"] == vllms["target"] == "AMXMLABackend"
    assert ours["block_size"] == vllms["block_size"]
    assert PER_CONFIG_LINE not in ours["_log"]


def test_without_amx_nothing_changes(models):
    for dtype in ("float32", "bfloat16"):
        ours = choice(models, amx=False, dtype=dtype)
        assert ours["target"] == ours["draft"] == "CPUMLABackend"
        assert PER_CONFIG_LINE not in ours["_log"]


def test_a_backend_the_user_chose_is_kept(models):
    chosen = choice(models, amx=True, dtype="float32", attention_backend="AMX_MLA",
                    spec_extra={"attention_backend": "AMX_MLA"})
    assert chosen["target"] == chosen["draft"] == "AMXMLABackend"
    assert PER_CONFIG_LINE not in chosen["_log"]


def test_target_on_cpu_mla_by_choice_takes_the_draft_along(models):
    """bfloat16 with --attention-backend CPU_MLA: the engine's block size is 16, which
    AMX_MLA cannot use, so the draft (left to vLLM) gets CPU_MLA too."""
    ours = choice(models, amx=True, dtype="bfloat16", attention_backend="CPU_MLA")
    vllms = choice(models, amx=True, dtype="bfloat16", attention_backend="CPU_MLA",
                   env=NO_PLUGIN)
    assert vllms["target"] == "CPUMLABackend" and vllms["draft"] == "AMXMLABackend"
    assert ours["target"] == ours["draft"] == "CPUMLABackend"
    assert "cannot serve the draft (block size 16)" in ours["_log"]
