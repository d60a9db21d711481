"""What a one-layer MLA EAGLE3 draft is, read from its config: dimensions, flags, tensors.

Pure functions only. The vLLM draft class, the pure-PyTorch reference, the checkpoint
checks and ``vllm-kimi-eagle inspect`` all read a draft through :func:`spec_from_config`,
so they agree on what the draft's tensors must be.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_kimi_eagle.config_access import config_value
from vllm_kimi_eagle.layer_ids import written_ids
from vllm_kimi_eagle.quantization import (
    Quantization,
    QuantizationConfigError,
    quantization_from_config,
    scale_tensors,
)

# Layer prefixes found in the field: `midlayer.` (training output) and `layers.0.`
# (exports). Tensor names below are written with the canonical `layers.0.`.
LAYER = "layers.0."
LAYER_PREFIX_ALIASES = {"midlayer.": LAYER}
# Some exports put everything but lm_head/d2t/t2d under `model.`.
STRIPPED_PREFIXES = ("model.",)
# Tensors present in checkpoints but unused at inference (t2d: the inverse map of d2t).
IGNORED_TENSORS = frozenset({"t2d"})
# Tensors a draft may leave out: it then shares the target's.
SHAREABLE_TENSORS = frozenset({"embed_tokens.weight", "lm_head.weight"})
# Number of captured target layers when a draft names none (vLLM's default).
DEFAULT_NUM_AUX = 3


class DraftConfigError(ValueError):
    """A draft config that cannot describe an MLA EAGLE3 draft."""


@dataclass(frozen=True)
class DraftSpec:
    hidden_size: int
    target_hidden_size: int
    intermediate_size: int
    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    vocab_size: int
    draft_vocab_size: int
    num_aux: int
    rms_norm_eps: float
    fc_norm: bool
    norm_output: bool
    norm_before_residual: bool
    quantization: Quantization | None = None

    @property
    def pruned_vocab(self) -> bool:
        return self.draft_vocab_size != self.vocab_size


def spec_from_config(config, source: str = "the draft config") -> DraftSpec:
    """Read a draft config (object or dict) into a DraftSpec; errors name the field."""

    def required(key):
        value = config_value(config, key)
        if value is None:
            raise DraftConfigError(
                f"{source}: field {key!r} is missing; an MLA EAGLE3 draft config must "
                f"set it (see the lightseekorg/kimi-k2.5-eagle3-mla config.json)."
            )
        return value

    hidden = int(required("hidden_size"))
    vocab = int(required("vocab_size"))
    ids, _ = written_ids(config)
    num_aux = config_value(config, "num_aux_hidden_states") or (
        len(ids) if ids else DEFAULT_NUM_AUX
    )
    q_lora = config_value(config, "q_lora_rank")
    try:
        quantization = quantization_from_config(config, source)
    except QuantizationConfigError as err:
        raise DraftConfigError(str(err)) from None
    return DraftSpec(
        hidden_size=hidden,
        target_hidden_size=int(config_value(config, "target_hidden_size") or hidden),
        intermediate_size=int(required("intermediate_size")),
        num_heads=int(required("num_attention_heads")),
        q_lora_rank=int(q_lora) if q_lora is not None else None,
        kv_lora_rank=int(required("kv_lora_rank")),
        qk_nope_head_dim=int(required("qk_nope_head_dim")),
        qk_rope_head_dim=int(required("qk_rope_head_dim")),
        v_head_dim=int(required("v_head_dim")),
        vocab_size=vocab,
        draft_vocab_size=int(config_value(config, "draft_vocab_size") or vocab),
        num_aux=int(num_aux),
        rms_norm_eps=float(config_value(config, "rms_norm_eps") or 1e-6),
        fc_norm=bool(config_value(config, "fc_norm") or config_value(config, "use_aux_norm")),
        norm_output=bool(config_value(config, "norm_output")),
        norm_before_residual=bool(config_value(config, "norm_before_residual")),
        quantization=quantization,
    )


def expected_tensors(spec: DraftSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor the draft can hold, canonical name -> full (unsharded) shape."""
    h, th = spec.hidden_size, spec.target_hidden_size
    qk_head = spec.qk_nope_head_dim + spec.qk_rope_head_dim
    attn = LAYER + "self_attn."
    tensors = {
        "embed_tokens.weight": (spec.vocab_size, h),
        LAYER + "input_layernorm.weight": (h,),
        LAYER + "hidden_norm.weight": (h,),
        LAYER + "post_attention_layernorm.weight": (h,),
        attn + "kv_a_proj_with_mqa.weight": (spec.kv_lora_rank + spec.qk_rope_head_dim, 2 * h),
        attn + "kv_a_layernorm.weight": (spec.kv_lora_rank,),
        attn + "kv_b_proj.weight": (
            spec.num_heads * (spec.qk_nope_head_dim + spec.v_head_dim),
            spec.kv_lora_rank,
        ),
        attn + "o_proj.weight": (h, spec.num_heads * spec.v_head_dim),
        LAYER + "mlp.gate_proj.weight": (spec.intermediate_size, h),
        LAYER + "mlp.up_proj.weight": (spec.intermediate_size, h),
        LAYER + "mlp.down_proj.weight": (h, spec.intermediate_size),
        "fc.weight": (h, spec.num_aux * th),
        "norm.weight": (h,),
        "lm_head.weight": (spec.draft_vocab_size, h),
    }
    if spec.q_lora_rank is None:
        tensors[attn + "q_proj.weight"] = (spec.num_heads * qk_head, 2 * h)
    else:
        tensors[attn + "q_a_proj.weight"] = (spec.q_lora_rank, 2 * h)
        tensors[attn + "q_a_layernorm.weight"] = (spec.q_lora_rank,)
        tensors[attn + "q_b_proj.weight"] = (spec.num_heads * qk_head, spec.q_lora_rank)
    if spec.fc_norm:
        for i in range(spec.num_aux):
            tensors[f"fc_norm.{i}.weight"] = (th,)
    # d2t: required with a pruned vocabulary; a full-vocabulary draft may carry the
    # identity (all zeros), as TorchSpec and SpecForge write it. Values are checked at load.
    tensors["d2t"] = (spec.draft_vocab_size,)
    if spec.quantization is not None:
        for name in linear_weights(spec):
            tensors.update(scale_tensors(spec.quantization, name, tensors[name]))
    return tensors


# The draft's Linear layers, which vLLM builds with the draft's quantization (every one:
# the names in a quantization_config's ignore list are vLLM's module names, which never
# match the draft's); embed_tokens and lm_head are never quantized.
LINEAR_WEIGHTS = ("fc.weight",) + tuple(
    LAYER + part for part in (
        "self_attn.q_proj.weight", "self_attn.q_a_proj.weight", "self_attn.q_b_proj.weight",
        "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_b_proj.weight",
        "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
        "mlp.down_proj.weight"))


def linear_weights(spec: DraftSpec) -> list[str]:
    """The Linear weights this draft holds (q_proj, or q_a_proj and q_b_proj)."""
    without = (LAYER + "self_attn.q_proj.weight" if spec.q_lora_rank is not None else
               (LAYER + "self_attn.q_a_proj.weight", LAYER + "self_attn.q_b_proj.weight"))
    return [name for name in LINEAR_WEIGHTS if name not in without]


def expected_dtype(spec: DraftSpec, canonical: str) -> str | None:
    """The safetensors dtype a tensor must have, where one is required (the quantized
    weights: a float weight there would be cast without its scale)."""
    if spec.quantization is not None and canonical in linear_weights(spec):
        return spec.quantization.weight_dtype
    return None


def canonical_name(name: str) -> str:
    """A checkpoint tensor name in canonical form (`layers.0.`, no `model.` prefix)."""
    for prefix in STRIPPED_PREFIXES:
        if name.startswith(prefix):
            name = name[len(prefix):]
    for alias, canonical in LAYER_PREFIX_ALIASES.items():
        if name.startswith(alias):
            name = canonical + name[len(alias):]
    return name
