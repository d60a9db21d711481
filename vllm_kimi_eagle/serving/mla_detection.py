"""MLA detection for EAGLE drafts whose config says ``model_type: kimi_k2``.

vLLM wraps a draft config in ``EAGLEConfig`` (model_type ``eagle``) and, for that wrapper,
accepts only DeepSeek model types as MLA (vLLM issue #45760, up to 0.33.0 at least). A
kimi_k2 MLA draft is then given a non-MLA KV cache and attention. We extend the check,
in memory only, so such a draft is judged MLA; every other config gets vLLM's own answer.
"""

from __future__ import annotations

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.compat.patching import wrap_method

# Inner model types of an EAGLE wrapper that mean "DeepSeek-style MLA" to us and that
# vLLM's own check leaves out.
KIMI_MLA_MODEL_TYPES = frozenset({"kimi_k2"})


def is_kimi_mla_draft(hf_text_config) -> bool:
    """True for an EAGLE wrapper config around a kimi_k2 config with MLA dimensions."""
    if getattr(hf_text_config, "model_type", None) != "eagle":
        return False
    inner = getattr(hf_text_config, "model", None)
    return (
        getattr(inner, "model_type", None) in KIMI_MLA_MODEL_TYPES
        and getattr(hf_text_config, "kv_lora_rank", None) is not None
    )


def install_mla_detection() -> bool:
    """Wrap vLLM's ``is_deepseek_mla`` so kimi_k2 drafts count as MLA (idempotent)."""

    def make_wrapper(original):
        def is_deepseek_mla(self) -> bool:
            return original(self) or is_kimi_mla_draft(self.hf_text_config)

        return is_deepseek_mla

    return wrap_method(
        vllm_compat.MLA_CHECK,
        "is_deepseek_mla",
        make_wrapper,
        "kimi_k2 drafts may be served without MLA on this vLLM release.",
    )
