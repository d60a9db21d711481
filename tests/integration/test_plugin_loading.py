"""What a fresh vLLM process makes of the plugin: which class serves the draft
architectures, register() run twice, an unsupported vLLM release. Each check runs in its
own interpreter (helpers.run_python), because registrations live in the process.
"""

from __future__ import annotations

import pytest

from tests.helpers import run_python
from vllm_kimi_eagle.draft.architectures import DRAFT_ARCHITECTURES


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
        ({}, "vllm_kimi_eagle.serving.draft_model"),
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
            "draft_module_imported": "vllm_kimi_eagle.serving.draft_model" in sys.modules,
            "registered": ModelRegistry.models["Eagle3DeepseekV2ForCausalLM"].module_name,
        }))
        """
    )
    assert result["same_check"] and result["wrapped_once"]
    assert result["draft_module_imported"] is False  # lazy "module:Class" registration
    assert result["registered"] == "vllm_kimi_eagle.serving.draft_class_entry"


def test_old_vllm_gets_one_warning_and_no_changes():
    result = run_python(
        """
        import json, logging
        import vllm.logger  # vLLM configures logging on import
        import vllm_kimi_eagle
        from vllm_kimi_eagle.compat import vllm_compat
        records = []
        class Keep(logging.Handler):
            def emit(self, record): records.append(record.getMessage())
        logging.getLogger("vllm.vllm_kimi_eagle").addHandler(Keep())
        vllm_compat.installed_vllm_version_text = lambda: "0.17.0"
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


# register() where the installed vLLM reports REPORTED; MOVED (code) runs first. It records
# the log, the class asked for that the speculative hook got, and what is registered and wrapped.
UNCHECKED = """
import json, logging, sys, time
import vllm.logger  # vLLM configures logging on import
import vllm_kimi_eagle
from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.serving import speculative_hook
records = []
class Keep(logging.Handler):
    def emit(self, record): records.append((record.levelname, record.getMessage()))
logging.getLogger("vllm.vllm_kimi_eagle").addHandler(Keep())
logging.getLogger("vllm.vllm_kimi_eagle").setLevel(logging.INFO)
vllm_compat.installed_vllm_version_text = lambda: REPORTED
MOVED
hooked = []
install_hook = speculative_hook.install_speculative_hook
def spy(asked):
    hooked.append(asked)
    return install_hook(asked=asked)
speculative_hook.install_speculative_hook = spy
from vllm.config.speculative import SpeculativeConfig
override = vars(SpeculativeConfig)["hf_config_override"]
imported_before = "vllm.model_executor.models.llama_eagle3" in sys.modules
started = time.perf_counter()
vllm_kimi_eagle.register()
seconds = time.perf_counter() - started
imported_by_register = (not imported_before
                        and "vllm.model_executor.models.llama_eagle3" in sys.modules)
from vllm_kimi_eagle.compat import release_gate
contract = list(release_gate.contract_problems_here())
contract_imported = "vllm.model_executor.models.llama_eagle3" in sys.modules
from vllm import ModelRegistry
resolved, guarded = {}, {}
for arch in ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM"):
    cls = ModelRegistry._try_load_model_cls(arch)
    resolved[arch] = getattr(cls, "guards", cls).__module__  # vLLM's class, guarded or not
    guarded[arch] = hasattr(cls, "guards")
started_up = None
if DRAFT_FOLDERS:
    from vllm.engine.arg_utils import EngineArgs
    built = EngineArgs(model=DRAFT_FOLDERS[0], max_model_len=256, speculative_config={
        "method": "eagle3", "model": DRAFT_FOLDERS[1], "num_speculative_tokens": 3}
        ).create_engine_config()
    started_up = built.speculative_config.draft_model_config.hf_config.architectures
from vllm.transformers_utils.config import _CONFIG_REGISTRY
from vllm.transformers_utils.model_arch_config_convertor import (
    ModelArchConfigConvertorBase as C)
print(json.dumps({
    "log": records,
    "hooked": hooked,
    "classes": {a: ModelRegistry.models[a].module_name
                for a in ("Eagle3DeepseekV2ForCausalLM", "Eagle3DeepseekV3ForCausalLM")},
    "kimi_class": _CONFIG_REGISTRY["kimi_k2"].__module__,
    "mla_wrapped": hasattr(C.is_deepseek_mla, "__wrapped__"),
    "override_replaced": vars(SpeculativeConfig)["hf_config_override"] is not override,
    "model_modules_imported": imported_by_register,
    "contract": contract,
    "contract_imported": contract_imported,
    "resolved": resolved,
    "guarded": guarded,
    "started_up": started_up,
    "seconds": seconds,
}))
"""
# The table expects a keyword the installed DeepseekV2MLAAttention lacks: a moved signature.
MOVE_INPUT_SIZE = """
vllm_compat.DRAFT_BUILDS_ON = tuple(
    (m, n, p, tuple("input_width" if k == "input_size" else k for k in ks))
    if n == "DeepseekV2MLAAttention" else (m, n, p, ks)
    for m, n, p, ks in vllm_compat.DRAFT_BUILDS_ON)
"""


ENTRY = "vllm_kimi_eagle.serving.draft_class_entry"
IN_TREE = "vllm.model_executor.models.deepseek_eagle3"


def register_as(reported: str, moved: str = "", env: dict | None = None,
                draft: tuple[str, str] | None = None) -> dict:
    """register() as vLLM ``reported``, then the class vLLM resolves the draft
    architectures to; with ``draft`` (target, draft folders), the speculative config too."""
    result = run_python(UNCHECKED.replace("REPORTED", repr(reported)).replace("MOVED", moved)
                        .replace("DRAFT_FOLDERS", repr(draft)), env={"VLLM_PLUGINS": "", **(env or {})})
    print(f"\nregister() as vLLM {reported}: {result['seconds']:.2f} s; log: {result['log']}")
    assert not [m for level, m in result["log"] if level == "ERROR"], result["log"]
    # The config fixes stay, whichever class serves.
    assert result["kimi_class"].startswith("vllm_kimi_eagle.")
    assert result["mla_wrapped"] is True
    return result


def test_a_moved_signature_on_an_unchecked_release_keeps_vllms_class_and_the_fixes(tiny):
    """register() reads no contract (it imports no model code in any process); where a
    draft is built, the contract is read and vLLM's class serves, the fixes kept."""
    import os

    result = register_as("0.34.0", MOVE_INPUT_SIZE,
                         draft=(os.path.join(tiny, "target"), os.path.join(tiny, "draft")))
    assert set(result["classes"].values()) == {ENTRY}
    assert result["model_modules_imported"] is False
    assert set(result["resolved"].values()) == {IN_TREE}
    assert set(result["guarded"].values()) == {True}  # refuses what it would serve wrong
    assert result["hooked"] == ["plugin"] and result["override_replaced"] is True
    assert any("DeepseekV2MLAAttention takes no parameter 'input_width'" in problem
               for problem in result["contract"])
    [moved] = [m for level, m in result["log"] if level == "WARNING" and "moved" in m
               and m.startswith("vllm-kimi-eagle: vLLM 0.34.0")]
    assert ("vllm.model_executor.models.deepseek_v2.DeepseekV2MLAAttention takes no "
            "parameter 'input_width'") in moved
    assert "VLLM_KIMI_EAGLE_DRAFT=upstream" in moved
    [loaded] = [m for _, m in result["log"] if m.startswith("vllm-kimi-eagle 0.1.0 loaded")]
    assert "served by its draft class where it can serve them, by vLLM's otherwise" in loaded
    # At start-up the draft goes to vLLM's class by name, with one line saying why.
    assert result["started_up"] == ["Eagle3DeepseekV2ForCausalLMInTree"]
    [line] = [m for m in result["_log"].splitlines()  # vLLM's handler: the hook's line
              if "is served by vLLM's in-tree draft class" in m and not m.startswith("{")]
    assert "what the plugin's class builds on moved in this vLLM" in line


@pytest.mark.parametrize("reported", ["0.34.0rc1", "dev"])
def test_an_unchecked_release_whose_contract_holds_gets_the_plugins_class(reported):
    result = register_as(reported)
    assert set(result["classes"].values()) == {ENTRY}
    assert set(result["resolved"].values()) == {"vllm_kimi_eagle.serving.draft_model"}
    assert result["hooked"] == ["plugin"] and result["override_replaced"] is True
    assert result["model_modules_imported"] is False  # register() read no contract
    assert result["contract"] == [] and result["contract_imported"] is True
    warnings = [m for level, m in result["log"] if level == "WARNING"]
    assert len(warnings) == 1 and "replaces vLLM's only where" in warnings[0], warnings


def test_an_older_unchecked_minor_with_the_override_is_judged_as_a_newer_one():
    result = register_as("0.25.1", MOVE_INPUT_SIZE, {"VLLM_KIMI_EAGLE_UNCHECKED_RELEASE": "1"})
    assert set(result["classes"].values()) == {ENTRY}
    assert set(result["resolved"].values()) == {IN_TREE}
    assert set(result["guarded"].values()) == {True}
    assert result["contract"]
    assert "VLLM_KIMI_EAGLE_UNCHECKED_RELEASE lets it act" in result["log"][0][1]


@pytest.mark.parametrize("reported", ["0.32.1", "0.33.0rc1"])
def test_a_release_of_a_checked_minor_acts_in_full_without_reading_the_contract(reported):
    result = register_as(reported)
    assert set(result["classes"].values()) == {ENTRY}
    assert set(result["resolved"].values()) == {"vllm_kimi_eagle.serving.draft_model"}
    assert result["hooked"] == ["plugin"]
    assert result["model_modules_imported"] is False
    assert result["contract"] == [] and result["contract_imported"] is False
    assert not [m for level, m in result["log"] if level == "WARNING"], result["log"]


# The hook's method moved as well: vLLM builds the speculative config without the plugin's
# hook, and the draft's class is built by the name the plugin registered.
WORKER_ONLY = """
import json, logging, os
import vllm_kimi_eagle
from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.serving import speculative_hook
vllm_compat.installed_vllm_version_text = lambda: "0.34.0"
MOVED
speculative_hook.install_speculative_hook = lambda asked: None
vllm_kimi_eagle.register()
from vllm import ModelRegistry
from vllm.engine.arg_utils import EngineArgs
from vllm_kimi_eagle.compat import release_gate
from vllm_kimi_eagle.serving import draft_class_entry
cls = ModelRegistry._try_load_model_cls("Eagle3DeepseekV2ForCausalLM")
found = {"class": cls.__name__, "bases": [b.__module__ for b in cls.__mro__[1:3]]}
for name in ("draft", "draft-k3-nope"):
    built = EngineArgs(model=os.path.join(TINY, "target"), max_model_len=256,
                       speculative_config={"method": "eagle3", "num_speculative_tokens": 3,
                                           "model": os.path.join(TINY, name)}
                       ).create_engine_config()
    try:
        if name == "draft":  # refused nothing; building it needs a device setup
            draft_class_entry.check_in_tree(built, release_gate.contract_problems_here())
        else:
            cls(vllm_config=built, prefix="")
        found[name] = "built"
    except Exception as err:
        found[name] = f"{type(err).__name__}: {err}"
print(json.dumps(found))
"""


def test_without_the_hook_the_workers_fallback_refuses_by_the_hooks_rule(tiny):
    """On an unchecked minor whose internals moved under both the plugin's class and its
    hook, vLLM's class serves the draft, guarded where it is built: a NoPE draft, which
    vLLM's class would rotate, is refused with the words the hook would use; a draft it
    serves right is not."""
    result = run_python(WORKER_ONLY.replace("MOVED", MOVE_INPUT_SIZE).replace("TINY", repr(tiny)),
                        env={"VLLM_PLUGINS": ""})
    print(f"\n{result}")
    assert result["draft"] == "built"
    refusal = result["draft-k3-nope"]
    assert refusal.startswith("DraftClassError: "), refusal
    for words in ("neither draft class serves this draft right", "what the plugin's class "
                  "builds on moved in this vLLM", "mla_use_nope", "VLLM_KIMI_EAGLE_DRAFT_NOPE=off"):
        assert words in refusal, words
    # vLLM's class, under its own name
    assert result["class"] == "Eagle3DeepseekV2ForCausalLM" and result["bases"][0] == IN_TREE
