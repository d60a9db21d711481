"""A draft's config.json, parsed once at the boundary into one validated record.

A checkpoint's config.json is untrusted input. :func:`parse_draft_config` reads it once
into :class:`DraftConfig`, checking every field the plugin or its draft class reads: JSON
types (an integer is an integer: ``1.5`` and ``"512"`` are refused, never truncated or
converted), ranges, enumerations, and fields written twice with different values. Every
other module reads the record, never the raw file. An error names the file, the field,
the value found and what was expected, one line per field.

The tool is pydantic (strict mode), as vLLM's own configs and the speculators project's
EAGLE3 configs use: its per-field errors carry the field's path and the value found,
which is what our messages need; the checks pydantic cannot express (ids written in two
places, a convention's spellings) are validators on the same models. Each validator and
each reading of the record calls a plain function of this module, where the decision is
(and where mutation testing, benchmarks/mutation_scores.py, can reach it); the field
limits stay declarative and tests/unit/test_draft_config_properties.py pins each one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from vllm_kimi_eagle.draft import draft_fields
from vllm_kimi_eagle.draft.architectures import TOOL_DRAFT_ARCHITECTURES
from vllm_kimi_eagle.draft.draft_fields import ROPE_BLOCKS

IDS_KEY = "eagle_aux_hidden_state_layer_ids"
CONVENTION_KEY = "eagle_aux_hidden_state_layer_ids_convention"
CONVENTION_VALUES = ("output-of", "input-of", "auto")
# Where a draft's ids can be written: read top level first (as every vLLM runner does).
TOP_IDS, NESTED_IDS = IDS_KEY, f"eagle_config.{IDS_KEY}"
# Rope types vLLM's get_rope builds (model_executor/layers/rotary_embedding, 0.28-0.33)
# that a Kimi/DeepSeek draft can carry.
ROPE_TYPES = ("default", "linear", "dynamic", "ntk", "yarn", "deepseek_yarn", "llama3",
              "longrope")
# Rope types whose scaling needs a factor.
FACTOR_ROPE_TYPES = ("linear", "dynamic", "ntk", "yarn", "deepseek_yarn", "llama3")
# transformers' rope base where a config writes none, and the types whose
# original_max_position_embeddings it fills from max_position_embeddings.
DEFAULT_ROPE_THETA = 10000.0
ORIGINAL_MAX_ROPE_TYPES = ("llama3", "yarn", "longrope")
# The training tools a config.json names by a fingerprint, and each fingerprint in words;
# ``written_by(record, tool)`` reads it. layer_ids.TOOL_EXPORTS says what each tool's ids
# mean, draft_positions which tools write mla_use_nope without training by it.
MODELOPT, SPECFORGE, TORCHSPEC = "Model-Optimizer", "SpecForge", "TorchSpec"
MODELOPT_KEYS = ("next_layer_regular", "parallel_draft_step", "parallel_draft_heads_num_layers")
TORCHSPEC_KEY = "_torchspec_version"
[SPECFORGE_ARCHITECTURE] = TOOL_DRAFT_ARCHITECTURES  # the one MLA architecture a tool writes
TOOL_FINGERPRINTS = {
    MODELOPT: f"eagle_config holds {'/'.join(MODELOPT_KEYS[:2])}",
    SPECFORGE: f"architecture {SPECFORGE_ARCHITECTURE}",
    TORCHSPEC: TORCHSPEC_KEY,
}
# The attribute the speculative hook writes on vLLM's draft config for the draft class
# (served_draft.py); never a field of a file.
SERVED_KEY = "vllm_kimi_eagle_served"
# Where vLLM finds a draft's quantization config, in its order (transformers_utils/config.py
# get_config, then model_arch_config_convertor._normalize_quantization_config): config.json's
# quantization_config, ModelOpt's own file next to config.json (before ModelOpt 0.31),
# which load_config_json puts under that file's name, then compressed-tensors' older
# compression_config.
QUANT_FILE = "hf_quant_config.json"
QUANTIZATION_KEYS = ("quantization_config", QUANT_FILE, "compression_config")


def carries_served_key(raw) -> bool:
    """Whether a config.json holds the plugin's in-memory channel (SERVED_KEY), at the top
    or in the draft config an EAGLE wrapper nests under "model" (vLLM copies the nested
    fields onto the wrapper)."""
    nested = raw.get("model") if isinstance(raw, dict) else None
    return isinstance(raw, dict) and (SERVED_KEY in raw or (
        isinstance(nested, dict) and SERVED_KEY in nested))


class DraftConfigError(ValueError):
    """A draft config that is malformed, or cannot describe a draft the plugin serves."""


PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveNumber = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Number = Annotated[float, Field(allow_inf_nan=False)]


class _Strict(BaseModel):
    # Unknown keys are kept by the file, ignored here: configs carry many fields the
    # plugin does not read.
    # Fields with an alias are read under that key only: a key spelled like the field's
    # Python name (``ids``, ``convention``) is an unknown key, never the layer ids.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


def _convention(value: str | None) -> str | None:
    """A convention as written (output_of, Input-Of-Layer, ...) in its one spelling."""
    if value is None:
        return None
    word = value.strip().lower().replace("_", "-").removesuffix("-layer")
    if word not in CONVENTION_VALUES:
        raise ValueError(f"expected one of {', '.join(map(repr, CONVENTION_VALUES))}")
    return word


def _distinct(ids: list[int] | None) -> list[int] | None:
    if ids is not None:
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(
                f"id(s) {repeated} appear more than once; each id names one captured target "
                "layer and the draft's fc takes one state per id")
    return ids


class RopeScaling(_Strict):
    """``rope_scaling`` (transformers 4) or ``rope_parameters`` (transformers 5)."""

    rope_type: str | None = None
    type: str | None = None  # the older spelling of rope_type
    rope_theta: PositiveNumber | None = None
    factor: PositiveNumber | None = None
    original_max_position_embeddings: PositiveInt | None = None
    beta_fast: Number | None = None
    beta_slow: Number | None = None
    mscale: Number | None = None
    mscale_all_dim: Number | None = None
    attention_factor: Number | None = None
    # Read by draft_fields.refusals (from the raw keys, once these types have passed).
    apply_yarn_scaling: bool | None = None
    partial_rotary_factor: PositiveNumber | None = None
    rope_dim: PositiveInt | None = None
    truncate: bool | None = None
    mrope_section: list[NonNegativeInt] | None = None
    mrope_interleaved: bool | None = None
    use_fope: bool | None = None

    @property
    def kind(self) -> str:
        return _rope_kind(self)

    @model_validator(mode="after")
    def _known_type(self):
        _check_rope_type(self)
        return self


def _rope_kind(block: RopeScaling) -> str:
    """The type transformers serves: rope_type, else type, else default."""
    return block.rope_type or block.type or "default"


def _check_rope_type(block: RopeScaling) -> None:
    """A rope type vLLM builds, with the factor its scaling needs."""
    kind = _rope_kind(block)
    if kind not in ROPE_TYPES:
        raise ValueError(f"rope type {kind!r} is not one of {', '.join(ROPE_TYPES)}")
    if kind in FACTOR_ROPE_TYPES and block.factor is None:
        raise ValueError(f"rope type {kind!r} needs a positive 'factor'")


@dataclass(frozen=True)
class ServedRope:
    """The rope transformers builds from a config.json, and so the one vLLM serves
    (transformers 5, ``RotaryEmbeddingConfigMixin.convert_rope_params_to_dict``): the
    ``rope_scaling`` block where it is a non-empty object, else ``rope_parameters``; the
    base from that block, else the top-level ``rope_theta``, else 10000; for the types in
    ORIGINAL_MAX_ROPE_TYPES a missing ``original_max_position_embeddings`` filled from
    ``max_position_embeddings``."""

    block: str  # "rope_scaling", "rope_parameters", or "" where neither is written
    kind: str
    theta: float
    theta_from: str  # the field the base was read from, or transformers' default
    factor: float | None = None
    original_max_position_embeddings: int | None = None
    original_max_filled: bool = False  # not written: transformers filled it

    def words(self) -> str:
        """The rope in one phrase, each value with the field it came from."""
        parts = [f"{self.kind} ({self.block})" if self.block
                 else "default (no rope block written)"]
        if self.factor is not None:
            parts.append(f"factor {self.factor:g}")
        if self.original_max_position_embeddings is not None:
            parts.append(f"original_max_position_embeddings "
                         f"{self.original_max_position_embeddings}" + (
                             " (not written: transformers fills it from "
                             "max_position_embeddings)" if self.original_max_filled else ""))
        parts.append(f"base {self.theta:g} ({self.theta_from})")
        return ", ".join(parts)


def _served_from(block_name: str, block: RopeScaling | None, top_theta: float | None,
                 max_positions: int | None) -> ServedRope:
    """What transformers builds from one rope block and the top-level fields."""
    block = block or RopeScaling()
    if block.rope_theta is not None:
        theta, theta_from = block.rope_theta, f"{block_name}.rope_theta"
    elif top_theta is not None:
        theta, theta_from = top_theta, "rope_theta"
    else:
        theta, theta_from = DEFAULT_ROPE_THETA, "not written: transformers' default"
    original, filled = block.original_max_position_embeddings, False
    if block.kind in ORIGINAL_MAX_ROPE_TYPES and original is None and max_positions:
        original, filled = max_positions, True
    return ServedRope(block_name, block.kind, theta, theta_from, block.factor, original,
                      filled)


# What vLLM's DeepSeek YaRN rope takes where a block leaves a value out
# (rotary_embedding DeepseekScalingRotaryEmbedding, 0.28-0.33).
YARN_DEFAULTS = {"beta_fast": 32, "beta_slow": 1, "mscale": 1, "mscale_all_dim": 0,
                 "attention_factor": None}


def _rope_values(rope: ServedRope, block: RopeScaling) -> dict[str, object]:
    """What decides the rotation and the softmax scale, by name, a value a block leaves
    out taken as vLLM's default, for comparing two blocks."""
    values = {"type": rope.kind, "base": rope.theta, "factor": rope.factor,
              "original_max_position_embeddings": rope.original_max_position_embeddings}
    for name, default in YARN_DEFAULTS.items():
        written = getattr(block, name)
        values[name] = default if written is None else written
    return values


class _LayerIds(_Strict):
    """The layer ids and their convention: written at the top level, in eagle_config, or
    both (``_check_written_once``)."""

    ids: list[NonNegativeInt] | None = Field(None, alias=IDS_KEY)
    convention: str | None = Field(None, alias=CONVENTION_KEY)

    _ids = field_validator("ids")(lambda cls, v: _distinct(v))
    _convention = field_validator("convention")(lambda cls, v: _convention(v))


class EagleConfig(_LayerIds):
    """The nested ``eagle_config`` (Model-Optimizer, TorchSpec, the lightseekorg drafts)."""

    use_input_layernorm_in_first_layer: bool | None = None
    use_last_layernorm: bool | None = None
    use_mtp_layernorm: bool | None = None
    use_aux_hidden_state: bool | None = None
    # Read by draft_fields.refusals (from the raw keys, once these types have passed).
    norm_before_fc: bool | None = None
    parallel_draft_step: PositiveInt | None = None
    modelopt_marker: bool = False  # set from the raw keys, not read from the file

    @model_validator(mode="before")
    @classmethod
    def _markers(cls, raw, info: ValidationInfo):
        return raw if _rebuilt(info) else _eagle_markers(raw)


def _eagle_markers(raw):
    """eagle_config as written, with the Model-Optimizer fingerprint read from its keys."""
    if isinstance(raw, Mapping):
        raw = dict(raw, modelopt_marker=any(k in raw for k in MODELOPT_KEYS))
    return raw


class DraftConfig(_LayerIds):
    """Every field of a draft's config.json that the plugin or its draft class reads (the
    top-level layer ids and convention: ``_LayerIds``)."""

    source: str = "config.json"  # the file, for messages (not read from it)
    architectures: list[str] | None = None
    model_type: str | None = None
    # dimensions
    hidden_size: PositiveInt | None = None
    target_hidden_size: PositiveInt | None = None
    intermediate_size: PositiveInt | None = None
    num_attention_heads: PositiveInt | None = None
    num_key_value_heads: PositiveInt | None = None
    head_dim: PositiveInt | None = None
    num_hidden_layers: PositiveInt | None = None
    q_lora_rank: PositiveInt | None = None
    kv_lora_rank: PositiveInt | None = None
    qk_nope_head_dim: NonNegativeInt | None = None
    qk_rope_head_dim: PositiveInt | None = None
    v_head_dim: PositiveInt | None = None
    vocab_size: PositiveInt | None = None
    draft_vocab_size: PositiveInt | None = None
    num_aux_hidden_states: PositiveInt | None = None
    max_position_embeddings: PositiveInt | None = None
    rms_norm_eps: PositiveNumber | None = None
    hidden_act: str | None = None
    logit_scale: PositiveNumber | None = None
    # positions
    rope_theta: PositiveNumber | None = None
    rope_scaling: RopeScaling | None = None
    rope_parameters: RopeScaling | None = None
    mla_use_nope: bool | None = None
    mla_use_nope_measured: bool | None = None  # calibrate --write: mla_use_nope was measured
    # Fields draft_fields.refusals reads from the raw keys: typed here, so that a malformed
    # value is refused by name before it is read.
    sliding_window: NonNegativeInt | None = None
    use_sliding_window: bool | None = None
    layer_types: list[str] | None = None
    rope_interleave: bool | None = None
    index_topk: PositiveInt | None = None
    partial_rotary_factor: PositiveNumber | None = None
    attention_bias: bool | None = None
    use_moe: bool | None = None
    norm_before_fc: bool | None = None
    use_mtp_layernorm: bool | None = None
    use_aux_hidden_state: bool | None = None
    parallel_draft_step: PositiveInt | None = None
    mla_use_output_gate: bool | None = None
    # EAGLE3 / EAGLE3.1 options
    fc_norm: bool | None = None
    use_aux_norm: bool | None = None
    norm_output: bool | None = None
    norm_before_residual: bool | None = None
    # An exporter's own format (compressed-tensors, ModelOpt, fp8, ...), judged by vLLM:
    # the record checks that it is an object, quantization.py reads what the plugin needs.
    quantization_config: dict[str, Any] | None = None
    quantization_from: str = QUANTIZATION_KEYS[0]  # set from the raw keys (QUANTIZATION_KEYS)
    eagle_config: EagleConfig | None = None
    torchspec_marker: bool = False  # set from the raw keys, not read from the file
    # The rope blocks written as non-empty objects (set from the raw keys).
    rope_blocks: Annotated[tuple[str, ...], Field(strict=False)] = ()  # a JSON list when rebuilt
    # The fields neither draft class serves as trained, one line each (draft_fields; set
    # from the raw keys), and those that matter only where the rope dims are rotated.
    field_refusals: Annotated[tuple[str, ...], Field(strict=False)] = ()
    rope_refusals: Annotated[tuple[str, ...], Field(strict=False)] = ()
    # The fields transformers fills where config.json leaves them out, with the value it
    # fills (draft_fields.unwritten).
    unwritten: Annotated[dict[str, int | None], Field(strict=False)] = {}

    @model_validator(mode="before")
    @classmethod
    def _markers(cls, raw, info: ValidationInfo):
        return raw if _rebuilt(info) else _draft_markers(raw)

    @model_validator(mode="after")
    def _written_once(self):
        _check_written_once(self)
        return self

    @model_validator(mode="after")
    def _sizes_agree(self):
        _check_sizes(self)
        return self

    # ---- readings of the record (each one a function below) ----------------------------
    @property
    def architecture(self) -> str | None:
        return _architecture(self)

    @property
    def nested(self) -> EagleConfig:
        return _nested(self)

    @property
    def written_ids(self) -> tuple[list[int] | None, str]:
        return _written_ids(self)

    @property
    def id_lists(self) -> list[tuple[str, list[int]]]:
        return _id_lists(self)

    @property
    def written_convention(self) -> tuple[str | None, str]:
        return _written_convention(self)

    @property
    def rope(self) -> ServedRope:
        return _served_rope(self)

    @property
    def config_rope_theta(self) -> float:
        """The rope base served from config.json (``rope``), before any override."""
        return _served_rope(self).theta

    @property
    def rope_disagreements(self) -> list[str]:
        return _rope_disagreements(self)

    @property
    def specforge_marker(self) -> bool:
        return _specforge_marker(self)

    def refusals(self, rotated: bool) -> tuple[str, ...]:
        """The fields no draft class serves as trained, one line each: those about
        rotating the rope dims only where they are served rotated."""
        return self.field_refusals + (self.rope_refusals if rotated else ())


# ---- the record's checks and readings, as plain functions (the validators and properties
# above only call them)
# Validation context of a record rebuilt from its own JSON (``record_from_json``): the
# fields set from raw keys are in it already.
REBUILT = "vllm_kimi_eagle_rebuilt"


def _rebuilt(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get(REBUILT))


def _draft_markers(raw):
    """config.json as written, with what the record sets from its raw keys: the TorchSpec
    fingerprint, the rope blocks written, the quantization config vLLM would read, and
    the fields no draft class serves as trained (draft_fields.refusals)."""
    if isinstance(raw, Mapping):
        quantization_from = next((k for k in QUANTIZATION_KEYS if raw.get(k) is not None),
                                 QUANTIZATION_KEYS[0])
        raw = dict(raw, torchspec_marker=raw.get(TORCHSPEC_KEY) is not None,
                   rope_blocks=tuple(k for k in ROPE_BLOCKS
                                     if isinstance(raw.get(k), Mapping) and raw[k]),
                   quantization_config=raw.get(quantization_from),
                   quantization_from=quantization_from,
                   field_refusals=draft_fields.refusals(raw),
                   rope_refusals=draft_fields.refusals(raw, rope_only=True),
                   unwritten=draft_fields.unwritten(raw))
    return raw


def _check_written_once(config: DraftConfig) -> None:
    """A field written at the top level and in eagle_config must say one thing."""
    nested = _nested(config)
    if config.ids and nested.ids and sorted(config.ids) != sorted(nested.ids):
        raise ValueError(
            f"{TOP_IDS} is {config.ids} and {NESTED_IDS} is {nested.ids}: two different "
            "id lists (vLLM reads the top-level one, tools may read the other). Keep one "
            "list, or make both the same")
    if config.convention and nested.convention and config.convention != nested.convention:
        raise ValueError(
            f"{CONVENTION_KEY} is {config.convention!r} and eagle_config.{CONVENTION_KEY} "
            f"is {nested.convention!r}: two different conventions. Keep one")


def _check_sizes(config: DraftConfig) -> None:
    """Sizes that vLLM would otherwise find wrong only at weight load or first step."""
    if config.draft_vocab_size and config.vocab_size \
            and config.draft_vocab_size > config.vocab_size:
        raise ValueError(
            f"draft_vocab_size is {config.draft_vocab_size} and vocab_size is "
            f"{config.vocab_size}: a draft vocabulary is the target's or a part of it "
            "(d2t maps each draft id to a target id). Set draft_vocab_size to the "
            "draft's lm_head rows, at most vocab_size")
    ids, where = _written_ids(config)
    if config.num_aux_hidden_states and ids and config.num_aux_hidden_states != len(ids):
        raise ValueError(
            f"num_aux_hidden_states is {config.num_aux_hidden_states} and {where} lists "
            f"{len(ids)} layer(s) {ids}: vLLM captures one state per id and the draft's "
            "fc takes num_aux_hidden_states of them. Make them agree (fc.weight's input "
            "size is num_aux_hidden_states x the target's hidden size)")


def _architecture(config: DraftConfig) -> str | None:
    return config.architectures[0] if config.architectures else None


def _nested(config: DraftConfig) -> EagleConfig:
    return config.eagle_config or EagleConfig()


def _written_ids(config: DraftConfig) -> tuple[list[int] | None, str]:
    """The ids as written and where: top level first (what vLLM reads first), then
    nested; an empty list counts as absent, as vLLM's runners treat it."""
    if config.ids:
        return list(config.ids), TOP_IDS
    nested = _nested(config)
    if nested.ids:
        return list(nested.ids), NESTED_IDS
    return None, "none"


def _id_lists(config: DraftConfig) -> list[tuple[str, list[int]]]:
    """Every non-empty id list the config writes: (where, ids as a set in layer order)."""
    return [(where, sorted(ids)) for where, ids in
            ((TOP_IDS, config.ids), (NESTED_IDS, _nested(config).ids)) if ids]


def _written_convention(config: DraftConfig) -> tuple[str | None, str]:
    """The convention config.json states, and where (None where it states none)."""
    for value, where in ((config.convention, CONVENTION_KEY),
                         (_nested(config).convention, f"eagle_config.{CONVENTION_KEY}")):
        if value and value != "auto":
            return value, f"config.json {where}"
    return None, ""


def _served_rope(config: DraftConfig) -> ServedRope:
    """The rope transformers and vLLM serve (``ServedRope``)."""
    block = config.rope_blocks[0] if config.rope_blocks else ""
    return _served_from(block, getattr(config, block) if block else None, config.rope_theta,
                        config.max_position_embeddings)


def _rope_disagreements(config: DraftConfig) -> list[str]:
    """Each fact about the rope that config.json gives twice, with two values: the
    two blocks, ``type`` and ``rope_type``, a block's base and the top-level one."""
    found, served = [], _served_rope(config)
    if len(config.rope_blocks) == 2:
        other = _served_from("rope_parameters", config.rope_parameters, config.rope_theta,
                             config.max_position_embeddings)
        mine = _rope_values(served, config.rope_scaling)
        theirs = _rope_values(other, config.rope_parameters)
        differ = [f"{name} {mine[name]} against {theirs[name]}" for name in mine
                  if mine[name] != theirs[name]]
        if differ:
            found.append(
                f"rope_scaling gives {served.words()} and rope_parameters gives "
                f"{other.words()}: two different ropes ({', '.join(differ)}; transformers, "
                "and so vLLM, serves rope_scaling). Keep the one block the draft was "
                "trained with")
    for name in config.rope_blocks:
        block = getattr(config, name)
        if block.type and block.rope_type and block.type != block.rope_type:
            found.append(
                f"{name}.type is {block.type!r} and {name}.rope_type is "
                f"{block.rope_type!r}: two rope types (transformers serves rope_type). "
                "Keep one")
        if name == served.block and block.rope_theta is not None \
                and config.rope_theta is not None and block.rope_theta != config.rope_theta:
            found.append(
                f"rope_theta is {config.rope_theta:g} and {name}.rope_theta is "
                f"{block.rope_theta:g}: two rope bases (transformers serves "
                f"{block.rope_theta:g}). Keep one, or set both to the base the draft "
                "was trained with")
    return found


def _specforge_marker(config: DraftConfig) -> bool:
    return SPECFORGE_ARCHITECTURE in (config.architectures or ())


def written_by(config: DraftConfig, tool: str) -> bool:
    """Whether config.json carries ``tool``'s fingerprint (TOOL_FINGERPRINTS)."""
    marks = {MODELOPT: config.nested.modelopt_marker, SPECFORGE: _specforge_marker(config),
             TORCHSPEC: config.torchspec_marker}
    return marks[tool]


# ---- parsing --------------------------------------------------------------------------------
# What each pydantic error type expects, in words.
EXPECTED = {
    "int_type": "an integer", "int_parsing": "an integer", "float_type": "a number",
    "float_parsing": "a number", "bool_type": "true or false", "string_type": "a string",
    "list_type": "a list", "dict_type": "an object", "model_type": "an object",
    "model_attributes_type": "an object", "finite_number": "a finite number",
    "too_short": "a list of {min_length}", "too_long": "a list of {max_length}",
    "greater_than": "a value greater than {gt}",
    "greater_than_equal": "a value of at least {ge}",
}


def _field(loc: tuple, written: Mapping[str, str]) -> str:
    """A field's path as config.json writes it (``written``: the keys a record field was
    read from, where they differ from its name)."""
    path = ""
    for part in (written.get(loc[0], loc[0]), *loc[1:]) if loc else ():
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _shown(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, list, dict)) \
        or value is None else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _words(error: dict, written: Mapping[str, str]) -> str:
    """One pydantic error as: field F is VALUE; expected E."""
    field = _field(error["loc"], written)
    if error["type"] == "value_error":
        why = error["msg"].removeprefix("Value error, ")
        return f"field {field!r} is {_shown(error['input'])}: {why}" if field else why
    expected = EXPECTED.get(error["type"], error["msg"])
    expected = expected.format(**{k: v for k, v in (error.get("ctx") or {}).items()})
    return f"field {field!r} is {_shown(error['input'])}; expected {expected}"


def parse_draft_config(raw: Any, source: str = "config.json") -> DraftConfig:
    """The validated record of a draft's config.json (already decoded from JSON).

    Raises DraftConfigError with one line per malformed field, each naming the file, the
    field, the value found and what was expected.
    """
    if not isinstance(raw, Mapping):
        raise DraftConfigError(
            f"{source}: holds {type(raw).__name__} {_shown(raw)}, not a JSON object of "
            "config fields; download or export the draft's config.json again.")
    if carries_served_key(raw):
        raise DraftConfigError(
            f"{source}: field {SERVED_KEY!r} is there, but only the plugin writes it, in "
            "memory, for its draft class; read from a file it would stand in for the "
            "plugin's decisions (capture ids, positions, rope). Remove it from config.json.")
    try:
        return DraftConfig.model_validate({**raw, "source": source})
    except ValidationError as err:
        # quantization_config is named by the key it was read from (QUANTIZATION_KEYS).
        written = {"quantization_config": _draft_markers(raw)["quantization_from"]}
        lines = [_words(e, written) for e in err.errors(include_url=False)]
        raise DraftConfigError(
            f"{source}: " + "; ".join(lines) + ". Fix the field in config.json, or export "
            "the draft again.") from None


def record_json(config: DraftConfig) -> str:
    """The record as JSON, to travel where only JSON may (vLLM's draft config, which vLLM
    hashes as JSON, to the engine's worker); ``record_from_json`` gives it back."""
    return config.model_dump_json(by_alias=True)


def record_from_json(text: str) -> DraftConfig:
    """The record ``record_json`` wrote, as it was: nothing is read again from config.json
    (the fields set from its raw keys travel in the JSON)."""
    return DraftConfig.model_validate_json(text, context={REBUILT: True})


def as_record(config: DraftConfig | Mapping, source: str = "config.json") -> DraftConfig:
    """The record itself, or the record of a config.json given as a dict (parsed here)."""
    return config if isinstance(config, DraftConfig) else parse_draft_config(config, source)


def load_config_json(path: str) -> Any:
    """A config.json file as JSON (a folder's or a file's path), with ModelOpt's
    hf_quant_config.json beside it under that name where config.json has no
    quantization_config (as vLLM reads it); a missing, truncated or corrupt file is a
    DraftConfigError naming it."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    found = _read_json(path)
    beside = os.path.join(os.path.dirname(path), QUANT_FILE)
    if isinstance(found, dict) and found.get("quantization_config") is None \
            and os.path.exists(beside):
        found = {**found, QUANT_FILE: _read_json(beside)}
    return found


def _read_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise DraftConfigError(f"{path}: not found; a draft folder holds its config.json "
                               "next to its weights.") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise DraftConfigError(f"{path}: not valid JSON ({err}); the file is truncated or "
                               "corrupt: download or export it again.") from None


def read_draft_config(path: str) -> DraftConfig:
    """Read and parse a draft's config.json file (a folder's or a file's path)."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    return parse_draft_config(load_config_json(path), path)
