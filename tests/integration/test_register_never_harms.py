"""register() as a guest in every vLLM process (vllm_kimi_eagle/__init__.py, settings.py,
patching.py): a variable it cannot read never stops vLLM, VLLM_KIMI_EAGLE=0 turns this
plugin alone off, and a failure halfway leaves vLLM as it was. Each case runs vLLM's own
plugin loader in a fresh interpreter."""

from __future__ import annotations

from tests.helpers import run_python

# What the plugin can change in a process, read back as object identities: vLLM's classes
# and functions it wraps or replaces, and the registries it writes.
STATE = """
import importlib, json, logging
import vllm.logger  # vLLM configures logging on import (up to 0.28 disabling earlier loggers)
records = []
class Keep(logging.Handler):
    def emit(self, record):
        records.append((record.levelname, record.getMessage()))
logging.getLogger("vllm.vllm_kimi_eagle").addHandler(Keep())
logging.getLogger("vllm.vllm_kimi_eagle").setLevel(logging.INFO)

def state():
    from vllm import ModelRegistry
    from vllm.config.speculative import SpeculativeConfig
    from vllm.platforms.cpu import CpuPlatform
    from vllm.transformers_utils.config import _CONFIG_REGISTRY
    from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase
    from vllm.utils import cpu_triton_utils
    from vllm.v1.attention.backends.mla.cpu_mla import CPUMLABackend
    from vllm.v1.sample.ops import topk_topp_sampler
    return {
        "draft class": ModelRegistry.models["Eagle3DeepseekV2ForCausalLM"].module_name,
        "kimi_k2 config": str(dict.get(_CONFIG_REGISTRY, "kimi_k2")),
        "mla check": id(vars(ModelArchConfigConvertorBase)["is_deepseek_mla"]),
        "spec post_init": id(vars(SpeculativeConfig)["__post_init__"]),
        "platform config check": id(vars(CpuPlatform)["check_and_update_config"]),
        "cpu mla builder": CPUMLABackend.get_builder_cls().__qualname__,
        "expand": id(cpu_triton_utils._expand_kernel_impl),
        "top k": id(topk_topp_sampler.apply_top_k_only),
    }
"""


def loaded(env: dict, before: str = "") -> dict:
    """vLLM's plugin loader in a fresh process: the state before and after, and the log."""
    return run_python(STATE + before + """
before = state()
from vllm.plugins import load_general_plugins, load_plugins_by_group
load_general_plugins()
print(json.dumps({"before": before, "after": state(), "log": records,
                  "plugins": sorted(load_plugins_by_group("vllm.general_plugins"))}))
""", env=env)


def changed(result: dict) -> list[str]:
    return sorted(k for k in result["before"] if result["before"][k] != result["after"][k])


def test_unreadable_variables_are_error_lines_and_defaults():
    result = loaded({"VLLM_KIMI_EAGLE_DRAFT": "off", "VLLM_KIMI_EAGLE_LAYER_IDS": "sideways",
                     "VLLM_KIMI_EAGLE_GREEDY_SHORTCUT": "maybe",
                     "VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA": "ten thousand",
                     "VLLM_KIMI_EAGLE_CPU_MLA_VERIFY": "false"})
    errors = [message for level, message in result["log"] if level == "ERROR"]
    print("\n" + "\n".join(errors))
    assert len(errors) == 4  # "false" is a valid off word for every switch
    for name in ("VLLM_KIMI_EAGLE_DRAFT='off'", "VLLM_KIMI_EAGLE_LAYER_IDS='sideways'",
                 "VLLM_KIMI_EAGLE_GREEDY_SHORTCUT='maybe'",
                 "VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA='ten thousand'"):
        assert any(name in e and "it is ignored" in e for e in errors), name
    # The defaults: the plugin's class serves; the switch that was readable is off.
    assert result["after"]["draft class"] == "vllm_kimi_eagle.draft_model"
    assert result["after"]["cpu mla builder"] == result["before"]["cpu mla builder"]


def test_the_switch_turns_this_plugin_alone_off():
    result = loaded({"VLLM_KIMI_EAGLE": "0"})
    assert changed(result) == []
    assert any("off (VLLM_KIMI_EAGLE=0)" in message for _, message in result["log"])
    assert "lora_filesystem_resolver" in result["plugins"]  # vLLM's own still load
    on = loaded({})
    print(f"\nwhat the plugin changes when on: {changed(on)}")
    assert "draft class" in changed(on) and "mla check" in changed(on)
    assert any(message.startswith("vllm-kimi-eagle 0.1.0 loaded:") for _, message in on["log"])


def test_a_failure_halfway_leaves_vllm_as_it_was():
    """A fault injected into the last installer: everything installed before it is undone."""
    result = loaded({}, before="""
import vllm_kimi_eagle.speculative_hook as hook
def broken(ours):
    raise RuntimeError("injected")
hook.install_speculative_hook = broken
""")
    assert changed(result) == []
    failures = [m for level, m in result["log"] if level == "ERROR"]
    assert len(failures) == 1 and "registering the plugin failed" in failures[0]
    assert "vLLM runs in this process as it would without the plugin" in failures[0]
