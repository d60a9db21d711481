"""The ``kimi_k2`` config alias: a DeepSeek-V3 config under Kimi's model_type.

Kimi-K2.x targets and the lightseekorg MLA drafts say ``"model_type": "kimi_k2"`` in
config.json. transformers does not know that name, and vLLM maps it to
``DeepseekV3Config`` itself, relabelling that shared class as it goes. We give the name a
class of its own, so ``deepseek_v3`` stays ``deepseek_v3``, and we refuse a kimi_k2 config
that lacks the MLA dimensions instead of quietly filling in DeepSeek-V3's defaults.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os

import transformers
from transformers import AutoConfig, DeepseekV3Config

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.compat.patching import remember_item, set_item

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler

MODEL_TYPE = "kimi_k2"
# Fields that make a kimi_k2 config an MLA config. Their DeepSeek-V3 defaults would be
# applied silently if they were missing, so a missing one is an error.
REQUIRED_MLA_FIELDS = ("kv_lora_rank", "qk_rope_head_dim")


# Fields whose value shapes or computes the model: null there is an error, never a default.
STATED_FIELDS = REQUIRED_MLA_FIELDS + (
    "hidden_size", "vocab_size", "intermediate_size", "num_attention_heads",
    "qk_nope_head_dim", "v_head_dim", "rms_norm_eps", "hidden_act",
)


class KimiConfigError(ValueError):
    """A kimi_k2 config.json that cannot describe an MLA model."""


def missing_mla_fields(config_dict: dict) -> list[str]:
    """The MLA fields a kimi_k2 config dict lacks (absent or null), in a fixed order."""
    return [field for field in REQUIRED_MLA_FIELDS if config_dict.get(field) is None]


@functools.lru_cache(maxsize=None)
def refuses_null(field: str) -> bool:
    """Whether this transformers' DeepSeek-V3 config refuses null for ``field`` (its strict
    types did for some fields from one release to the next: asked, not listed)."""
    try:
        DeepseekV3Config(**{field: None})
    except Exception:  # noqa: BLE001 - strict dataclass errors have no common base
        return True
    return False


def refused_nulls(config_dict: dict, refuses=refuses_null) -> tuple[list[str], list[str]]:
    """The null fields of ``config_dict`` that the config class refuses, as (stated, rest):
    ``stated`` shape the model (an error), ``rest`` read as the class's defaults. Template
    exports (Model-Optimizer's) write null for every key neither config had."""
    refused = [key for key, value in config_dict.items() if value is None and refuses(key)]
    return ([key for key in refused if key in STATED_FIELDS],
            [key for key in refused if key not in STATED_FIELDS])


def describe_source(name_or_path: str | os.PathLike | None) -> str:
    """Where a config came from, as a user would look for it."""
    if not name_or_path:
        return "a kimi_k2 config (source unknown)"
    path = os.fspath(name_or_path)
    if os.path.isdir(path):
        return os.path.join(path, "config.json")
    return path


class KimiK2Config(DeepseekV3Config):
    """DeepSeek-V3 config read from a config.json whose model_type is ``kimi_k2``."""

    model_type = MODEL_TYPE

    @classmethod
    def from_dict(cls, config_dict, **kwargs):
        source = describe_source(kwargs.get("name_or_path") or config_dict.get("_name_or_path"))
        missing = missing_mla_fields(config_dict)
        if missing:
            raise KimiConfigError(
                f"{source}: model_type is 'kimi_k2' but the field(s) "
                f"{', '.join(repr(f) for f in missing)} are missing. A kimi_k2 model uses "
                "multi-head latent attention and its config must state its MLA "
                "dimensions; add them to config.json (Kimi-K2.x uses "
                '"kv_lora_rank": 512, "qk_rope_head_dim": 64).'
            )
        stated, defaulted = refused_nulls(config_dict)
        if stated:
            raise KimiConfigError(
                f"{source}: {', '.join(repr(f) for f in stated)} "
                f"{'is' if len(stated) == 1 else 'are'} null, and the value shapes the model, "
                "so it is not guessed. Write the value into config.json (the draft's own, "
                "else its target's)."
            )
        if defaulted:
            logger.debug("vllm-kimi-eagle: null %s in a kimi_k2 config read as transformers' "
                         "defaults (transformers %s refuses null there)", ", ".join(defaulted),
                         transformers.__version__)
            config_dict = {k: v for k, v in config_dict.items() if k not in defaulted}
        return super().from_dict(config_dict, **kwargs)


def register_config_alias() -> None:
    """Register KimiK2Config with transformers and vLLM's config registry (idempotent,
    journaled: restore() puts back what transformers held, vLLM's own alias included)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    extra = getattr(CONFIG_MAPPING, "_extra_content", None)  # where register() writes
    if isinstance(extra, dict):
        remember_item(extra, MODEL_TYPE)
    AutoConfig.register(MODEL_TYPE, KimiK2Config, exist_ok=True)
    module_name, attribute = vllm_compat.CONFIG_REGISTRY
    try:
        registry = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        logger.warning(
            "vllm-kimi-eagle: %s.%s not found (%s); kimi_k2 configs load through "
            "transformers' AutoConfig only.",
            module_name,
            attribute,
            err,
        )
        return
    set_item(registry, MODEL_TYPE, KimiK2Config)
