"""SpecForge's MLA drafts stay EAGLE3 drafts: the wrapper over vLLM's
SpeculativeConfig.hf_config_override keeps vLLM's contract (fresh process)."""

from __future__ import annotations

from tests.helpers import run_python


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
