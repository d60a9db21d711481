"""vLLM's choice of MLA attention backend on CPUs with AMX, mended where it cannot serve.

On an x86 CPU with AMX tiles, vLLM's CPU platform picks ``AMX_MLA`` for every MLA model
(target and EAGLE3 draft alike) unless ``CPU_MLA`` was asked for, without asking the
backend whether it serves the model: ``AMX_MLA`` takes bfloat16 only (and head size 576,
block sizes that are multiples of 32), so a float32 engine dies while loading its weights
(``vllm_compat.CPU_MLA_CHOICE``). Plain vLLM fails the same way.

The plugin decides per model, before vLLM fixes the block size: where vLLM would pick
``AMX_MLA`` on its own and that backend refuses the model while ``CPU_MLA`` takes it, the
model gets ``CPU_MLA``: ``attention_config.backend`` for the target,
``speculative_config.attention_backend`` for the draft. A backend the user chose is never
changed; where neither backend takes the model, vLLM's own choice and error stand. One
log line says what was changed and why. Elsewhere (no AMX, no MLA, a GPU) nothing runs.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.compat.patching import wrap_method

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler


@dataclass(frozen=True)
class ModelAttention:
    """What a backend is asked to serve for one model (the target or the draft)."""

    role: str  # "target" or "draft"
    dtype: object  # torch.dtype
    head_size: int
    kv_cache_dtype: str | None
    block_size: int | None  # None: not fixed yet (vLLM picks the backend's default)


def refusals(backend, model: ModelAttention) -> list[str]:
    """Why ``backend`` (a vLLM attention backend class) cannot serve ``model``, as the
    backend itself declares it; [] where it can."""
    checks = (
        ("dtype", model.dtype, backend.supports_dtype),
        ("head size", model.head_size, backend.supports_head_size),
        ("KV cache dtype", model.kv_cache_dtype, backend.supports_kv_cache_dtype),
        ("block size", model.block_size, backend.supports_block_size),
    )
    return [f"{what} {str(value).removeprefix('torch.')}"
            for what, value, supported in checks if not supported(value)]


def choose(amx: bool, chosen, amx_refused: list[str], cpu_refused: list[str]) -> str | None:
    """The backend the plugin gives a model (``"CPU_MLA"``), or None to leave vLLM's choice:
    only where vLLM would pick AMX_MLA on its own (AMX present, nothing chosen), AMX_MLA
    refuses the model and CPU_MLA serves it."""
    if not amx or chosen is not None or not amx_refused or cpu_refused:
        return None
    return vllm_compat.CPU_MLA_NAME


def log_line(changed: dict[str, list[str]]) -> str:
    """The one line that says which models were moved and why (``changed``: role ->
    what AMX_MLA refused)."""
    parts = [f"the {role} ({', '.join(why)})" for role, why in changed.items()]
    return (f"{vllm_compat.AMX_MLA_NAME}, which vLLM picks on this CPU with AMX, cannot serve "
            f"{' and '.join(parts)}: {' and '.join(changed)} get {vllm_compat.CPU_MLA_NAME}. "
            "A backend you choose (--attention-backend, the speculative config's "
            "attention_backend) is kept.")


def _backends():
    """(AttentionBackendEnum, the AMX_MLA class, the CPU_MLA class), or None where this
    vLLM has no AMX_MLA backend."""
    module_name, enum_name = vllm_compat.ATTENTION_BACKEND_ENUM
    enum = getattr(importlib.import_module(module_name), enum_name)
    if not hasattr(enum, vllm_compat.AMX_MLA_NAME):
        return None
    try:
        amx = enum[vllm_compat.AMX_MLA_NAME].get_class()
        cpu = enum[vllm_compat.CPU_MLA_NAME].get_class()
    except ImportError:
        return None
    return enum, amx, cpu


def _model_attention(role: str, model_config, cache_dtype, block_size) -> ModelAttention:
    return ModelAttention(role=role, dtype=model_config.dtype,
                          head_size=model_config.get_head_size(),
                          kv_cache_dtype=cache_dtype, block_size=block_size)


def mend(vllm_config, amx: bool) -> dict[str, list[str]]:
    """Give CPU_MLA to the target and the draft of ``vllm_config`` where AMX_MLA would be
    picked and cannot serve them; returns role -> what AMX_MLA refused, for each model
    changed."""
    model_config = vllm_config.model_config
    if not amx or model_config is None:
        return {}
    backends = _backends()
    if backends is None:
        return {}
    enum, amx_backend, cpu_backend = backends
    cache = vllm_config.cache_config
    user_block = cache.block_size if getattr(cache, "user_specified_block_size", False) else None
    changed: dict[str, list[str]] = {}
    attention = vllm_config.attention_config
    if model_config.use_mla:
        target = _model_attention("target", model_config, cache.cache_dtype, user_block)
        picked = choose(amx, attention.backend, refusals(amx_backend, target),
                        refusals(cpu_backend, target))
        if picked:
            attention.backend = enum[picked]
            changed["target"] = refusals(amx_backend, target)
    spec = vllm_config.speculative_config
    draft_config = getattr(spec, "draft_model_config", None)
    if draft_config is not None and draft_config.use_mla:
        # On CPU_MLA the target fixes the engine's block size at 16 (check_and_update_config).
        on_cpu_mla = model_config.use_mla and attention.backend == enum[vllm_compat.CPU_MLA_NAME]
        block = vllm_compat.CPU_MLA_BLOCK_SIZE if on_cpu_mla else user_block
        draft = _model_attention("draft", draft_config, spec.kv_cache_dtype or cache.cache_dtype,
                                 block)
        picked = choose(amx, spec.attention_backend, refusals(amx_backend, draft),
                        refusals(cpu_backend, draft))
        if picked:
            spec.attention_backend = enum[picked]
            changed["draft"] = refusals(amx_backend, draft)
    return changed


def amx_available() -> bool:
    """vLLM's own test for AMX_MLA (``vllm_compat.AMX_PROBE``), on x86 only."""
    import platform

    module_name, name = vllm_compat.AMX_PROBE
    probe = getattr(importlib.import_module(module_name), name, None)
    return platform.machine().lower() in ("x86_64", "amd64") and bool(probe and probe())


def install_cpu_mla_backend_choice() -> str:
    """Wrap the CPU platform's config check so that it mends the backend choice first:
    ``"installed"``, ``"not cpu"`` (another platform: nothing to do) or ``"absent"``."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return "not cpu"

    def make_wrapper(original):
        def check_and_update_config(cls, vllm_config):
            changed = mend(vllm_config, amx_available())
            if changed:
                logger.info("vllm-kimi-eagle: %s", log_line(changed))
            return original(cls, vllm_config)

        return check_and_update_config

    placed = wrap_method(
        vllm_compat.CPU_PLATFORM, vllm_compat.PLATFORM_CONFIG_CHECK, make_wrapper,
        "on a CPU with AMX, float32 MLA models keep vLLM's AMX_MLA backend, which cannot "
        "load them; pass --attention-backend CPU_MLA and the speculative config's "
        '"attention_backend": "CPU_MLA".')
    return "installed" if placed else "absent"
