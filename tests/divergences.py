"""vLLM made to do otherwise than the plugin decided, after it decided: each divergence a
change to vLLM's own code in the engine's process, as a vLLM release could make it (the
self-check must refuse each at start-up: tests/e2e/test_self_check_e2e.py).

``VLLM_KIMI_EAGLE_PLANTED_DIVERGENCE=NAME`` in an engine's environment applies one
(tests/engine_run.py reads it before the engine starts, so the worker in that process runs
with it; a VLLM_ variable, so that the start account tells each such start apart).
"""

from __future__ import annotations

ENV = "VLLM_KIMI_EAGLE_PLANTED_DIVERGENCE"


def capture_ids_shifted() -> None:
    """A vLLM that learned the output-of convention: the target adds 1 to every id it is
    given, so the ids the plugin already resolved shift twice."""
    from vllm.model_executor.models.deepseek_v2 import DeepseekV2ForCausalLM

    original = DeepseekV2ForCausalLM.set_aux_hidden_state_layers

    def shifted(self, layers):
        return original(self, tuple(i + 1 for i in layers))

    DeepseekV2ForCausalLM.set_aux_hidden_state_layers = shifted


def shortcut_reset() -> None:
    """A proposer that resets the greedy shortcut flag it copied from the config."""
    from vllm.v1.spec_decode.llm_base_proposer import SpecDecodeBaseProposer

    original = SpecDecodeBaseProposer.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.use_local_argmax_reduction = False

    SpecDecodeBaseProposer.__init__ = init


def class_swapped() -> None:
    """A model loader that builds vLLM's in-tree MLA draft class for the architecture the
    plugin registered its class under."""
    import importlib

    from vllm.model_executor.model_loader import utils

    original = utils.get_model_architecture

    def swapped(model_config):
        cls, arch = original(model_config)
        if cls.__module__.startswith("vllm_kimi_eagle"):
            cls = importlib.import_module("vllm.model_executor.models.deepseek_eagle3") \
                .Eagle3DeepseekV2ForCausalLM
        return cls, arch

    utils.get_model_architecture = swapped


def rope_override_dropped() -> None:
    """vLLM's MLA attention building its rope from the base the file says (50000 for the
    tiny drafts), not the one the plugin set on the config object
    (VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA)."""
    from vllm.model_executor.models import deepseek_v2

    original = deepseek_v2.get_rope

    def get_rope(*args, **kwargs):
        parameters = kwargs.get("rope_parameters")
        if isinstance(parameters, dict) and parameters.get("rope_theta") == 10000.0:
            kwargs["rope_parameters"] = {**parameters, "rope_theta": 50000.0}
        return original(*args, **kwargs)

    deepseek_v2.get_rope = get_rope


DIVERGENCES = {"capture-ids-shifted": capture_ids_shifted, "shortcut-reset": shortcut_reset,
               "class-swapped": class_swapped, "rope-override-dropped": rope_override_dropped}


def apply(name: str) -> None:
    DIVERGENCES[name]()
