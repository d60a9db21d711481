"""Keep SpecForge's MLA EAGLE3 drafts EAGLE3 drafts when vLLM reads their config.

SpecForge saves its MLA draft (``DeepseekV3ForCausalLMEagle3``) on a DeepseekV3Config,
so its config.json says ``model_type: deepseek_v3``. vLLM's draft-config override
(``SpeculativeConfig.hf_config_override``) turns every deepseek_v3 draft config into a
DeepSeek MTP one (model_type ``deepseek_mtp``, architecture ``DeepSeekMTPModel``),
whatever the speculative method, so such a draft fails with "architectures
['Eagle3DeepSeekMTPModel'] are not supported". We leave configs whose architecture is
SpecForge's EAGLE3 class untouched; every other config gets vLLM's own override.
"""

from __future__ import annotations

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.compat.patching import wrap_method
from vllm_kimi_eagle.draft.architectures import TOOL_DRAFT_ARCHITECTURES


def is_eagle3_draft_config(hf_config) -> bool:
    """A draft config in a training tool's EAGLE3 architecture that vLLM must not rewrite."""
    architectures = getattr(hf_config, "architectures", None) or ()
    return bool(set(TOOL_DRAFT_ARCHITECTURES) & set(architectures))


def make_override_wrapper(original):
    """vLLM's override, passed over for a training tool's EAGLE3 draft config: every
    other config, and every further argument (vLLM 0.33 passes
    transformers_mtp_overrides, positionally or by keyword), goes to ``original`` as
    given."""

    def hf_config_override(hf_config, *args, **kwargs):
        if is_eagle3_draft_config(hf_config):
            return hf_config
        return original(hf_config, *args, **kwargs)

    return hf_config_override


def install_draft_config_override() -> bool:
    """Wrap vLLM's draft-config override so SpecForge MLA drafts stay EAGLE3 (idempotent)."""
    return wrap_method(
        vllm_compat.SPECULATIVE_CONFIG,
        vllm_compat.DRAFT_CONFIG_OVERRIDE,
        make_override_wrapper,
        "SpecForge MLA drafts (DeepseekV3ForCausalLMEagle3) are read as DeepSeek MTP and "
        "fail to load.",
    )
