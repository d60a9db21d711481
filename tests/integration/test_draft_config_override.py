"""SpecForge's MLA drafts stay EAGLE3 drafts: the wrapper over vLLM's
SpeculativeConfig.hf_config_override keeps vLLM's contract (the installed wrapper in a
fresh process; the wrapper's forwarding on a recording stand-in)."""

from __future__ import annotations

from tests.helpers import run_python
from vllm_kimi_eagle.serving.draft_config_override import make_override_wrapper

SPECFORGE = ["DeepseekV3ForCausalLMEagle3"]


class Config:
    def __init__(self, architectures):
        self.architectures = architectures


def test_every_argument_reaches_vllms_override_as_given():
    calls = []

    def original(*args, **kwargs):
        calls.append((args, kwargs))
        return "vllm's"

    wrapper = make_override_wrapper(original)
    config = Config(["DeepseekV3ForCausalLM"])
    # As vLLM 0.28-0.32 call it, and as 0.33 does (a second argument, either way).
    assert wrapper(config) == "vllm's"
    assert wrapper(config, {"n": 1}) == "vllm's"
    assert wrapper(config, transformers_mtp_overrides={"n": 2}) == "vllm's"
    assert calls == [((config,), {}), ((config, {"n": 1}), {}),
                     ((config,), {"transformers_mtp_overrides": {"n": 2}})]
    specforge = Config(SPECFORGE)
    assert wrapper(specforge, transformers_mtp_overrides=None) is specforge
    assert len(calls) == 3  # vLLM's override never saw the SpecForge draft


def test_installed_wrapper_keeps_vllms_contract():
    """Installed by register(): a static method, picklable by reference (vLLM ships it to
    engine processes), the same result as vLLM's own for a DeepSeek-V3 config (which
    vLLM turns into DeepSeek MTP), and the SpecForge draft config left as it is."""
    result = run_python(
        """
        import inspect, json, pickle
        import vllm_kimi_eagle
        vllm_kimi_eagle.register()
        from vllm.config.speculative import SpeculativeConfig as S
        from transformers import DeepseekV3Config
        wrapper = S.hf_config_override
        original = wrapper.__wrapped__
        def config(architectures):
            return DeepseekV3Config(architectures=architectures, num_nextn_predict_layers=1)
        ours, theirs = wrapper(config(["DeepseekV3ForCausalLM"])), \
            original(config(["DeepseekV3ForCausalLM"]))
        kept = wrapper(config(["DeepseekV3ForCausalLMEagle3"]))
        print(json.dumps({
            "wrapped": wrapper is not original,
            "static": isinstance(inspect.getattr_static(S, "hf_config_override"), staticmethod),
            "pickled_by_reference": pickle.loads(pickle.dumps(wrapper)) is wrapper,
            "vllm_result": [ours.model_type, theirs.model_type, ours.to_dict() == theirs.to_dict()],
            "specforge": [kept.model_type, kept.architectures],
        }))
        """
    )
    assert result["wrapped"] and result["static"] and result["pickled_by_reference"], result
    assert result["vllm_result"] == ["deepseek_mtp", "deepseek_mtp", True], result
    assert result["specforge"] == ["deepseek_v3", SPECFORGE], result
