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
places, a convention's spellings) are validators on the same models.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

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
# Fingerprints of the training tools (layer_ids.TOOL_EXPORTS says what each means).
MODELOPT_KEYS = ("next_layer_regular", "parallel_draft_step", "parallel_draft_heads_num_layers")
TORCHSPEC_KEY = "_torchspec_version"


class DraftConfigError(ValueError):
    """A draft config that is malformed, or cannot describe a draft the plugin serves."""


PositiveInt = Annotated[int, Field(gt=0)]
NonNegativeInt = Annotated[int, Field(ge=0)]
PositiveNumber = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Number = Annotated[float, Field(allow_inf_nan=False)]


class _Strict(BaseModel):
    # Unknown keys are kept by the file, ignored here: configs carry many fields the
    # plugin does not read.
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True, populate_by_name=True)


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
    rope_theta: PositiveNumber | None = None  # rope_parameters only
    factor: PositiveNumber | None = None
    original_max_position_embeddings: PositiveInt | None = None
    beta_fast: Number | None = None
    beta_slow: Number | None = None
    mscale: Number | None = None
    mscale_all_dim: Number | None = None

    @property
    def kind(self) -> str:
        return self.rope_type or self.type or "default"

    @model_validator(mode="after")
    def _known_type(self):
        if self.kind not in ROPE_TYPES:
            raise ValueError(f"rope type {self.kind!r} is not one of {', '.join(ROPE_TYPES)}")
        if self.kind in FACTOR_ROPE_TYPES and self.factor is None:
            raise ValueError(f"rope type {self.kind!r} needs a positive 'factor'")
        return self


class WeightQuantization(_Strict):
    type: str | None = None
    num_bits: PositiveInt | None = None
    strategy: str | None = None


class ActivationQuantization(_Strict):
    dynamic: bool | None = None


class QuantizationGroup(_Strict):
    weights: WeightQuantization | None = None
    input_activations: ActivationQuantization | None = None


class QuantizationConfig(_Strict):
    quant_method: str = ""
    weight_block_size: Annotated[list[PositiveInt], Field(min_length=2, max_length=2)] | None = None
    activation_scheme: str | None = None
    config_groups: dict[str, QuantizationGroup] | None = None


class EagleConfig(_Strict):
    """The nested ``eagle_config`` (Model-Optimizer, TorchSpec, the lightseekorg drafts)."""

    ids: list[NonNegativeInt] | None = Field(None, alias=IDS_KEY)
    convention: str | None = Field(None, alias=CONVENTION_KEY)
    use_input_layernorm_in_first_layer: bool | None = None
    use_last_layernorm: bool | None = None
    use_mtp_layernorm: bool | None = None
    use_aux_hidden_state: bool | None = None
    modelopt_marker: bool = False  # set from the raw keys, not read from the file

    _ids = field_validator("ids")(lambda cls, v: _distinct(v))
    _convention = field_validator("convention")(lambda cls, v: _convention(v))

    @model_validator(mode="before")
    @classmethod
    def _markers(cls, raw):
        if isinstance(raw, Mapping):
            raw = dict(raw, modelopt_marker=any(k in raw for k in MODELOPT_KEYS))
        return raw


class DraftConfig(_Strict):
    """Every field of a draft's config.json that the plugin or its draft class reads."""

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
    mla_use_output_gate: bool | None = None
    # EAGLE3 / EAGLE3.1 options
    fc_norm: bool | None = None
    use_aux_norm: bool | None = None
    norm_output: bool | None = None
    norm_before_residual: bool | None = None
    quantization_config: QuantizationConfig | None = None
    # layer ids and their convention, at the top level and nested
    ids: list[NonNegativeInt] | None = Field(None, alias=IDS_KEY)
    convention: str | None = Field(None, alias=CONVENTION_KEY)
    eagle_config: EagleConfig | None = None
    torchspec_marker: bool = False  # set from the raw keys, not read from the file

    _ids = field_validator("ids")(lambda cls, v: _distinct(v))
    _convention = field_validator("convention")(lambda cls, v: _convention(v))

    @model_validator(mode="before")
    @classmethod
    def _markers(cls, raw):
        if isinstance(raw, Mapping):
            raw = dict(raw, torchspec_marker=raw.get(TORCHSPEC_KEY) is not None)
        return raw

    @model_validator(mode="after")
    def _written_once(self):
        """A field written at the top level and in eagle_config must say one thing."""
        nested = self.eagle_config or EagleConfig()
        if self.ids and nested.ids and sorted(self.ids) != sorted(nested.ids):
            raise ValueError(
                f"{TOP_IDS} is {self.ids} and {NESTED_IDS} is {nested.ids}: two different "
                "id lists (vLLM reads the top-level one, tools may read the other). Keep one "
                "list, or make both the same")
        if self.convention and nested.convention and self.convention != nested.convention:
            raise ValueError(
                f"{CONVENTION_KEY} is {self.convention!r} and eagle_config.{CONVENTION_KEY} "
                f"is {nested.convention!r}: two different conventions. Keep one")
        return self

    # ---- readings of the record --------------------------------------------------------
    @property
    def architecture(self) -> str | None:
        return self.architectures[0] if self.architectures else None

    @property
    def nested(self) -> EagleConfig:
        return self.eagle_config or EagleConfig()

    @property
    def written_ids(self) -> tuple[list[int] | None, str]:
        """The ids as written and where: top level first (what vLLM reads first), then
        nested; an empty list counts as absent, as vLLM's runners treat it."""
        if self.ids:
            return list(self.ids), TOP_IDS
        if self.nested.ids:
            return list(self.nested.ids), NESTED_IDS
        return None, "none"

    @property
    def id_lists(self) -> list[tuple[str, list[int]]]:
        """Every non-empty id list the config writes: (where, ids as a set in layer order)."""
        return [(where, sorted(ids)) for where, ids in
                ((TOP_IDS, self.ids), (NESTED_IDS, self.nested.ids)) if ids]

    @property
    def written_convention(self) -> tuple[str | None, str]:
        """The convention config.json states, and where (None where it states none)."""
        for value, where in ((self.convention, CONVENTION_KEY),
                             (self.nested.convention, f"eagle_config.{CONVENTION_KEY}")):
            if value and value != "auto":
                return value, f"config.json {where}"
        return None, ""

    @property
    def rope(self) -> RopeScaling | None:
        """The rope parameters: rope_parameters (transformers 5), else rope_scaling."""
        return self.rope_parameters or self.rope_scaling

    @property
    def config_rope_theta(self) -> float | None:
        """The rope base config.json gives (rope_parameters first, then rope_theta)."""
        if self.rope_parameters is not None and self.rope_parameters.rope_theta is not None:
            return self.rope_parameters.rope_theta
        return self.rope_theta

    @property
    def specforge_marker(self) -> bool:
        return "DeepseekV3ForCausalLMEagle3" in (self.architectures or ())


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


def _field(loc: tuple) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _shown(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, list, dict)) \
        or value is None else repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _words(error: dict) -> str:
    """One pydantic error as: field F is VALUE; expected E."""
    field = _field(error["loc"])
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
    try:
        return DraftConfig.model_validate({**raw, "source": source})
    except ValidationError as err:
        lines = [_words(e) for e in err.errors(include_url=False)]
        raise DraftConfigError(
            f"{source}: " + "; ".join(lines) + ". Fix the field in config.json, or export "
            "the draft again.") from None


def as_record(config: DraftConfig | Mapping, source: str = "config.json") -> DraftConfig:
    """The record itself, or the record of a config.json given as a dict (parsed here)."""
    return config if isinstance(config, DraftConfig) else parse_draft_config(config, source)


def load_config_json(path: str) -> Any:
    """A config.json file as JSON (a folder's or a file's path); a missing, truncated or
    corrupt file is a DraftConfigError naming it."""
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
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
