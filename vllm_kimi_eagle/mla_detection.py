"""MLA detection for EAGLE drafts whose config says ``model_type: kimi_k2``.

vLLM wraps a draft config in ``EAGLEConfig`` (model_type ``eagle``) and, for that wrapper,
accepts only DeepSeek model types as MLA (vLLM issue #45760, up to 0.33.0 at least). A
kimi_k2 MLA draft is then given a non-MLA KV cache and attention. We extend the check,
in memory only, so such a draft is judged MLA; every other config gets vLLM's own answer.
"""

from __future__ import annotations

import importlib
import logging

from vllm_kimi_eagle import vllm_compat

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler

# Inner model types of an EAGLE wrapper that mean "DeepSeek-style MLA" to us and that
# vLLM's own check leaves out.
KIMI_MLA_MODEL_TYPES = frozenset({"kimi_k2"})
_MARK = "_vllm_kimi_eagle_wrapped"


def is_kimi_mla_draft(hf_text_config) -> bool:
    """True for an EAGLE wrapper config around a kimi_k2 config with MLA dimensions."""
    if getattr(hf_text_config, "model_type", None) != "eagle":
        return False
    inner = getattr(hf_text_config, "model", None)
    return (
        getattr(inner, "model_type", None) in KIMI_MLA_MODEL_TYPES
        and getattr(hf_text_config, "kv_lora_rank", None) is not None
    )


def install_mla_detection() -> None:
    """Wrap vLLM's ``is_deepseek_mla`` so kimi_k2 drafts count as MLA (idempotent)."""
    module_name, class_name = vllm_compat.MLA_CHECK
    try:
        importlib.import_module("vllm.config")  # the convertor module is circular without it
        convertor = getattr(importlib.import_module(module_name), class_name)
        original = convertor.is_deepseek_mla
    except (ImportError, AttributeError) as err:
        logger.warning(
            "vllm-kimi-eagle: cannot find %s.%s.is_deepseek_mla (%s); kimi_k2 drafts "
            "may be served without MLA on this vLLM release. Please report it.",
            module_name,
            class_name,
            err,
        )
        return
    if getattr(original, _MARK, False):
        return

    def is_deepseek_mla(self) -> bool:
        return original(self) or is_kimi_mla_draft(self.hf_text_config)

    setattr(is_deepseek_mla, _MARK, True)
    is_deepseek_mla.__wrapped__ = original
    is_deepseek_mla.__doc__ = original.__doc__
    convertor.is_deepseek_mla = is_deepseek_mla
