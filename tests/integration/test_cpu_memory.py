"""The CPU memory mend's installation (vllm_kimi_eagle/cpu/cpu_memory.py) on the real CPU
build, fresh process: every wrap in place says "installed"; a class that lost a method it
wraps says "partial", and packing is deferred only where apply() can pack on first use."""

from __future__ import annotations

from tests.helpers import run_python

PROBE = """
import importlib, json, sys, types
from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.cpu import cpu_memory
LOST
importlib.import_module(vllm_compat.CPU_MODEL_RUNNER)
module, name = vllm_compat.CPU_EMBEDDING_METHOD
owner = getattr(importlib.import_module(module), name)
before = vars(owner).get("process_weights_after_loading")
state = cpu_memory.install_cpu_memory()
print(json.dumps({"state": state, "deferred_packing":
                  vars(owner).get("process_weights_after_loading") is not before}))
"""
# The embedding method's class without apply(), as a vLLM that renamed it would be: a
# class of the same module standing in for it.
LOST_APPLY = """
class WithoutApply:
    def process_weights_after_loading(self, layer):
        return None
module = importlib.import_module(vllm_compat.CPU_EMBEDDING_METHOD[0])
module.WithoutApply = WithoutApply
vllm_compat.CPU_EMBEDDING_METHOD = (vllm_compat.CPU_EMBEDDING_METHOD[0], "WithoutApply")
"""


def test_every_wrap_in_place_is_installed():
    result = run_python(PROBE.replace("LOST", ""))
    assert result["state"] == "installed" and result["deferred_packing"], result


def test_a_lost_method_is_partial_and_packing_stays_vllms():
    result = run_python(PROBE.replace("LOST", LOST_APPLY))
    assert result["state"] == "partial", result
    assert result["deferred_packing"] is False  # an LM head would be left unpacked
    assert "cannot find" in result["_log"] and "WithoutApply.apply" in result["_log"]
