"""What a one-layer EAGLE3 draft is, from its validated config record: dimensions, flags,
tensors.

Pure functions only. The vLLM draft class, the pure-PyTorch reference, the checkpoint
checks and ``vllm-kimi-eagle inspect`` all read a draft through :func:`spec_from_config`
over the record ``draft_config.parse_draft_config`` made, so they agree on what the
draft's tensors and forward pass must be. The record has checked every field's type and
range; this module decides what the fields mean together, and refuses what the plugin's
class does not implement (``draft_fields.refusals``, an activation other than silu).

MLA drafts (``attention == "mla"``) are the plugin's; Llama-architecture EAGLE3 drafts
(``"gqa"``, ``LlamaForCausalLMEagle3``) are read too, for the reference that trains the
tiny ones: vLLM serves them with its own class.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_kimi_eagle.draft.architectures import DRAFT_ARCHITECTURES, TOOL_DRAFT_ARCHITECTURES
from vllm_kimi_eagle.draft.draft_config import DraftConfig, DraftConfigError
from vllm_kimi_eagle.draft.quantization import (
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
    attention: str = "mla"  # "mla", or "gqa" for Llama-architecture drafts
    num_kv_heads: int | None = None  # gqa
    head_dim: int | None = None  # gqa
    # Kimi-K3 drafts: q/k rope dims never rotated (mla_use_nope) and a sigmoid gate on the
    # attention output (mla_use_output_gate), as the config says; what is served may be
    # asked otherwise (``nope_override``).
    nope: bool = False
    output_gate: bool = False
    # eagle_config.use_input_layernorm_in_first_layer (hidden_norm) and use_last_layernorm
    # (the final norm before the LM head): Model-Optimizer's names, True in every Kimi draft.
    hidden_norm: bool = True
    final_norm: bool = True
    logit_scale: float = 1.0
    max_position_embeddings: int = 8192

    @property
    def pruned_vocab(self) -> bool:
        return self.draft_vocab_size != self.vocab_size


# Config fields that change the forward pass in a way the plugin does not implement:
# (where, the record's value, why).
ACTIVATIONS = ("silu",)
# Rope types vLLM's MLA attention builds as written: it turns every other type into
# DeepSeek YaRN (deepseek_v2.py DeepseekV2MLAAttention, 0.28-0.33).
MLA_ROPE_TYPES = ("default", "yarn", "deepseek_yarn")
LLAMA_TYPES = ("llama",)
# Architectures a draft's config.json may name: vLLM serves each as an EAGLE3 draft
# (it renames X to Eagle3X unless the name starts or ends with Eagle3).
MLA_ARCHITECTURES = DRAFT_ARCHITECTURES + TOOL_DRAFT_ARCHITECTURES + tuple(
    name.removeprefix("Eagle3") for name in DRAFT_ARCHITECTURES)
LLAMA_ARCHITECTURES = ("LlamaForCausalLMEagle3", "Eagle3LlamaForCausalLM", "LlamaForCausalLM")


def _flag(value: bool | None, default: bool) -> bool:
    return default if value is None else value


def spec_from_config(config: DraftConfig, served_nope: bool | None = None) -> DraftSpec:
    """The DraftSpec of a draft's validated config record; a config that cannot describe a
    draft the plugin reads, or describes a forward pass no draft class serves as trained,
    is a DraftConfigError naming the file and the field. ``served_nope``: whether its rope
    dims will be left unrotated as served (the positions decision, and the plugin's class
    serving it); None: as config.json says."""
    _check_architecture(config)
    rotated = not (config.mla_use_nope if served_nope is None else served_nope)
    problems = forward_problems(config, rotated)
    if problems:
        raise DraftConfigError(f"{config.source}: " + "; ".join(problems) + ".")
    return draft_layout(config)


def forward_problems(config: DraftConfig, rotated: bool) -> list[str]:
    """What in the config describes a forward pass the plugin's class does not serve as
    trained, one line per field (``rotated``: the rope dims are rotated as served)."""
    refused = list(config.refusals(rotated))
    if refused:  # the refused fields alone: the rest of the file may not apply
        return refused
    activation = config.hidden_act or "silu"
    if activation not in ACTIVATIONS:
        return [f"hidden_act is {activation!r}; the draft's MLP is built for "
                f"{', '.join(ACTIVATIONS)} (vLLM's DeepSeek MLP), so this draft would be "
                "served with another activation than it was trained with"]
    disagreements = config.rope_disagreements + _fc_norm_disagreement(config)
    if disagreements:
        return disagreements
    rope = config.rope
    if config.kv_lora_rank is not None and rope.kind not in MLA_ROPE_TYPES and rotated:
        key = "rope_type" if getattr(config, rope.block).rope_type else "type"
        return [f"field '{rope.block}.{key}' is {rope.kind!r}, but vLLM's MLA attention "
                f"builds only {', '.join(map(repr, MLA_ROPE_TYPES))} as written and serves "
                "every other rope type as DeepSeek YaRN, so this draft would be served with "
                "another rope than it was trained with. Serve a draft trained with default "
                "or yarn rope"]
    return []


def _check_architecture(config: DraftConfig) -> None:
    architecture = config.architecture
    if architecture is not None and architecture not in MLA_ARCHITECTURES + LLAMA_ARCHITECTURES:
        raise DraftConfigError(
            f"{config.source}: field 'architectures' is {config.architectures}: "
            f"{architecture!r} is not an EAGLE3 draft architecture the plugin knows (MLA: "
            f"{', '.join(MLA_ARCHITECTURES)}; Llama: {', '.join(LLAMA_ARCHITECTURES)}). "
            "Use the architecture its training tool wrote.")


def draft_layout(config: DraftConfig, in_tree: bool = False) -> DraftSpec:
    """The draft's dimensions and tensors as its config.json describes them, whatever its
    forward pass: what its checkpoint must hold. ``in_tree``: as vLLM's in-tree class
    reads the fields it reads otherwise (fc_norm alone, never SpecForge's use_aux_norm). A
    field the layout needs that is missing is a DraftConfigError naming it."""
    source = config.source
    _check_architecture(config)

    def required(key):
        value = getattr(config, key)
        if value is None:
            raise DraftConfigError(
                f"{source}: field {key!r} is missing; an MLA EAGLE3 draft config must "
                f"set it (see the lightseekorg/kimi-k2.5-eagle3-mla config.json)."
            )
        return value

    hidden = required("hidden_size")
    vocab = required("vocab_size")
    ids, _ = config.written_ids
    try:
        quantization = quantization_from_config(config.quantization_config, source,
                                                config.quantization_from)
    except QuantizationConfigError as err:
        raise DraftConfigError(str(err)) from None
    heads = required("num_attention_heads")
    nested = config.nested
    common = dict(
        hidden_size=hidden,
        target_hidden_size=config.target_hidden_size or hidden,
        intermediate_size=required("intermediate_size"),
        num_heads=heads,
        vocab_size=vocab,
        draft_vocab_size=config.draft_vocab_size or vocab,
        num_aux=config.num_aux_hidden_states or (len(ids) if ids else DEFAULT_NUM_AUX),
        rms_norm_eps=config.rms_norm_eps or 1e-6,
        fc_norm=bool(config.fc_norm or (config.use_aux_norm and not in_tree)),
        norm_output=bool(config.norm_output),
        norm_before_residual=bool(config.norm_before_residual),
        quantization=quantization,
        hidden_norm=_flag(nested.use_input_layernorm_in_first_layer, True),
        final_norm=_flag(nested.use_last_layernorm, True),
        logit_scale=config.logit_scale or 1.0,
        max_position_embeddings=config.max_position_embeddings or 8192,
    )
    if config.kv_lora_rank is None and config.model_type in LLAMA_TYPES:
        head_dim = config.head_dim or hidden // heads
        return DraftSpec(**common, q_lora_rank=None, kv_lora_rank=0, qk_nope_head_dim=0,
                         qk_rope_head_dim=head_dim, v_head_dim=head_dim, attention="gqa",
                         num_kv_heads=config.num_key_value_heads or heads, head_dim=head_dim)
    return DraftSpec(
        **common,
        q_lora_rank=config.q_lora_rank,
        kv_lora_rank=required("kv_lora_rank"),
        qk_nope_head_dim=required("qk_nope_head_dim"),
        qk_rope_head_dim=required("qk_rope_head_dim"),
        v_head_dim=required("v_head_dim"),
        nope=bool(config.mla_use_nope),
        output_gate=bool(config.mla_use_output_gate),
    )


def _fc_norm_disagreement(config: DraftConfig) -> list[str]:
    """fc_norm and use_aux_norm (SpecForge's name) written with two values: vLLM's in-tree
    class reads fc_norm only, the plugin's either."""
    if config.fc_norm is not None and config.use_aux_norm is not None \
            and config.fc_norm != config.use_aux_norm:
        return [f"fc_norm is {str(config.fc_norm).lower()} and use_aux_norm is "
                f"{str(config.use_aux_norm).lower()}: two answers to whether the captured "
                "states are normalised before fc (vLLM's in-tree class reads fc_norm, the "
                "plugin's class either). Keep one, or set both to what the draft was "
                "trained with (fc_norm.* tensors in the checkpoint mean true)"]
    return []


def expected_tensors(spec: DraftSpec) -> dict[str, tuple[int, ...]]:
    """Every tensor the draft can hold, canonical name -> full (unsharded) shape."""
    h, th = spec.hidden_size, spec.target_hidden_size
    attn = LAYER + "self_attn."
    tensors = {
        "embed_tokens.weight": (spec.vocab_size, h),
        LAYER + "input_layernorm.weight": (h,),
        LAYER + "hidden_norm.weight": (h,),
        LAYER + "post_attention_layernorm.weight": (h,),
        attn + "o_proj.weight": (h, spec.num_heads * spec.v_head_dim),
        LAYER + "mlp.gate_proj.weight": (spec.intermediate_size, h),
        LAYER + "mlp.up_proj.weight": (spec.intermediate_size, h),
        LAYER + "mlp.down_proj.weight": (h, spec.intermediate_size),
        "fc.weight": (h, spec.num_aux * th),
        "norm.weight": (h,),
        "lm_head.weight": (spec.draft_vocab_size, h),
    }
    tensors.update(_attention_tensors(spec))
    if not spec.hidden_norm:
        del tensors[LAYER + "hidden_norm.weight"]
    if not spec.final_norm:
        del tensors["norm.weight"]
    if spec.fc_norm:
        for i in range(spec.num_aux):
            tensors[f"fc_norm.{i}.weight"] = (th,)
    # d2t: required with a pruned vocabulary; a full-vocabulary draft may carry the
    # identity (all zeros), as TorchSpec and SpecForge write it. Values are checked at load.
    tensors["d2t"] = (spec.draft_vocab_size,)
    if spec.quantization is not None and spec.quantization.loads_in_plugin_class:
        for name in linear_weights(spec):
            tensors.update(scale_tensors(spec.quantization, name, tensors[name]))
    return tensors


def _attention_tensors(spec: DraftSpec) -> dict[str, tuple[int, ...]]:
    """The attention's projections and norms (o_proj aside), for MLA or GQA."""
    h2, s = 2 * spec.hidden_size, spec
    attn = LAYER + "self_attn."
    if s.attention == "gqa":
        return {attn + "q_proj.weight": (s.num_heads * s.head_dim, h2),
                attn + "k_proj.weight": (s.num_kv_heads * s.head_dim, h2),
                attn + "v_proj.weight": (s.num_kv_heads * s.head_dim, h2)}
    qk_head = s.qk_nope_head_dim + s.qk_rope_head_dim
    tensors = {
        attn + "kv_a_proj_with_mqa.weight": (s.kv_lora_rank + s.qk_rope_head_dim, h2),
        attn + "kv_a_layernorm.weight": (s.kv_lora_rank,),
        attn + "kv_b_proj.weight": (s.num_heads * (s.qk_nope_head_dim + s.v_head_dim),
                                    s.kv_lora_rank),
    }
    if s.q_lora_rank is None:
        tensors[attn + "q_proj.weight"] = (s.num_heads * qk_head, h2)
    else:
        tensors[attn + "q_a_proj.weight"] = (s.q_lora_rank, h2)
        tensors[attn + "q_a_layernorm.weight"] = (s.q_lora_rank,)
        tensors[attn + "q_b_proj.weight"] = (s.num_heads * qk_head, s.q_lora_rank)
    if s.output_gate:
        tensors[attn + "g_proj.weight"] = (s.num_heads * s.v_head_dim, h2)
    return tensors


# The draft's Linear layers, which vLLM builds with the draft's quantization (every one:
# the names in a quantization_config's ignore list are vLLM's module names, which never
# match the draft's); embed_tokens and lm_head are never quantized.
LINEAR_WEIGHTS = ("fc.weight",) + tuple(
    LAYER + part for part in (
        "self_attn.q_proj.weight", "self_attn.q_a_proj.weight", "self_attn.q_b_proj.weight",
        "self_attn.k_proj.weight", "self_attn.v_proj.weight",
        "self_attn.kv_a_proj_with_mqa.weight", "self_attn.kv_b_proj.weight",
        "self_attn.g_proj.weight", "self_attn.o_proj.weight", "mlp.gate_proj.weight",
        "mlp.up_proj.weight", "mlp.down_proj.weight"))


def linear_weights(spec: DraftSpec) -> list[str]:
    """The Linear weights this draft holds."""
    tensors = {**_attention_tensors(spec), "fc.weight": (), LAYER + "self_attn.o_proj.weight": (),
               **{LAYER + f"mlp.{m}.weight": () for m in ("gate_proj", "up_proj", "down_proj")}}
    return [name for name in LINEAR_WEIGHTS if name in tensors]


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
