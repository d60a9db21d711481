"""Every config.json field that shapes what an MLA EAGLE3 draft computes, and what the
plugin does with it: honours it (and where), refuses it (why, and what would serve the
draft), or states why it cannot change the draft.

``FIELDS`` is the table (docs/checkpoints.md prints it; tests/unit/test_draft_fields.py
tries each row with a value other than the default). ``refusals`` reads a raw config.json
and gives one line per refused field it carries: the record keeps them
(``DraftConfig.field_refusals``), the plugin's class refuses them (``draft_spec``) and so
does the hand-off to vLLM's class (``draft_class.in_tree_gaps``), since neither class
serves them as trained. Pure: it reads the file's values, nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

HONOURED, REFUSED, NO_EFFECT = "honoured", "refused", "no effect"
LEFT_OUT = "(left out)"  # in a row's example: the key is removed from config.json
# The two blocks a config.json may write its rope in, in the order transformers picks them.
ROPE_BLOCKS = ("rope_scaling", "rope_parameters")
YARN_TYPES = ("yarn", "deepseek_yarn")
# What serves a draft trained with a field the plugin refuses, where nothing in vLLM does.
NOTHING_IN_VLLM = "no vLLM release's MLA draft class serves that"


@dataclass(frozen=True)
class FieldRule:
    """One row: the field as config.json writes it, what the plugin does, and why."""

    field: str
    action: str  # HONOURED, REFUSED or NO_EFFECT
    words: str  # honoured: where; refused: why, then what would serve it; no effect: why
    # REFUSED rows: the value that makes the draft refused, or None where it does not.
    found: Callable[[Mapping[str, Any]], Any] = lambda raw: None
    # A value other than the default, for the check that tries every row: a patch of
    # config.json (None writes a null; LEFT_OUT removes the key).
    example: Mapping[str, Any] = field(default_factory=dict)
    # The config.json keys the row covers, where ``field`` is not one key.
    keys: tuple[str, ...] = ()
    # What the example is compared with: the base config with this patch (a field that
    # acts only beside another).
    against: Mapping[str, Any] = field(default_factory=dict)
    # REFUSED rows: the value that refuses, in words, for the table (the refusal line
    # names the value found).
    when: str = ""
    # REFUSED rows about the rotation of the rope dims: no refusal where they are served
    # unrotated (NoPE, the plugin's class).
    rope_only: bool = False
    # Rows about vLLM's MLA attention: a Llama-architecture draft is served by vLLM's Llama
    # class, which reads them as written.
    mla_only: bool = False

    @property
    def name(self) -> str:
        """The field as config.json writes it, without the row's qualifier."""
        return self.field.split(" (")[0]

    @property
    def config_keys(self) -> tuple[str, ...]:
        return self.keys or (self.name.split(".")[-1],)


def _top(key: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda raw: raw.get(key)


def _nested(key: str) -> Callable[[Mapping[str, Any]], Any]:
    """The value in eagle_config, else at the top level (tools write either)."""
    def read(raw):
        nested = raw.get("eagle_config")
        if isinstance(nested, Mapping) and nested.get(key) is not None:
            return nested[key]
        return raw.get(key)
    return read


def _in_blocks(raw: Mapping[str, Any], key: str) -> Any:
    """``key`` at the top level, else in the first rope block that writes it."""
    if raw.get(key) is not None:
        return raw[key]
    for block in ROPE_BLOCKS:
        values = raw.get(block)
        if isinstance(values, Mapping) and values.get(key) is not None:
            return values[key]
    return None


def _rope_kind(raw: Mapping[str, Any]) -> str:
    for block in ROPE_BLOCKS:
        values = raw.get(block)
        if isinstance(values, Mapping) and values:
            return str(values.get("rope_type") or values.get("type") or "default")
    return "default"


def _window(raw: Mapping[str, Any]) -> Any:
    """The window in effect: a positive sliding_window, unless use_sliding_window is false
    (transformers' and vLLM's reading; 0 and null mean none)."""
    window = raw.get("sliding_window")
    if isinstance(window, (int, float)) and not isinstance(window, bool) and window > 0 \
            and raw.get("use_sliding_window") is not False:
        return window
    return None


def _windowed_layers(raw: Mapping[str, Any]) -> Any:
    kinds = raw.get("layer_types")
    if isinstance(kinds, list) and any(kind != "full_attention" for kind in kinds):
        return kinds
    return None


def _written(key: str) -> Callable[[Mapping[str, Any]], Any]:
    """The key's value where config.json writes the key, a null included (as "null")."""
    return lambda raw: ("null" if raw[key] is None else raw[key]) if key in raw else None


def _yarn_attention_factor(raw: Mapping[str, Any]) -> Any:
    factor = _in_blocks(raw, "attention_factor")
    return factor if _rope_kind(raw) in YARN_TYPES else None


def _yarn_untruncated(raw: Mapping[str, Any]) -> Any:
    return False if _rope_kind(raw) in YARN_TYPES and \
        _in_blocks(raw, "truncate") is False else None


# Rope-block keys with which vLLM's get_rope builds another rope class.
ROPE_CLASS_KEYS = ("mrope_section", "mrope_interleaved", "use_fope")


def _rope_class_keys(raw: Mapping[str, Any]) -> Any:
    found = [key for key in ROPE_CLASS_KEYS if _in_blocks(raw, key) not in (None, False)]
    return ", ".join(found) or None


def _yarn_scaling_off(raw: Mapping[str, Any]) -> Any:
    return False if _in_blocks(raw, "apply_yarn_scaling") is False else None


def _partial_rotary(raw: Mapping[str, Any]) -> Any:
    factor = _in_blocks(raw, "partial_rotary_factor")
    return factor if factor is not None and factor != 1 else None


def _rope_dim(raw: Mapping[str, Any]) -> Any:
    dim = _in_blocks(raw, "rope_dim")
    return dim if dim is not None and dim != raw.get("qk_rope_head_dim") else None


def _null_rope_theta(raw: Mapping[str, Any]) -> Any:
    """rope_theta written as null with no base in a rope block: transformers passes the
    null on to vLLM's rope, while a missing one is transformers' default."""
    if "rope_theta" in raw and raw["rope_theta"] is None \
            and _in_blocks(raw, "rope_theta") is None:
        return "null"
    return None


def _yarn_fill_unwritten(raw: Mapping[str, Any]) -> Any:
    """A yarn rope without original_max_position_embeddings and without
    max_position_embeddings: transformers fills the first with its own default (4096)."""
    if _rope_kind(raw) in YARN_TYPES and _in_blocks(raw, "original_max_position_embeddings") \
            is None and raw.get("max_position_embeddings") is None:
        return "null" if "max_position_embeddings" in raw else "not written"
    return None


def _true(read: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]], Any]:
    return lambda raw: True if read(raw) is True else None


def _false(read: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]], Any]:
    return lambda raw: False if read(raw) is False else None


def _above_one(read: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]], Any]:
    def found(raw):
        value = read(raw)
        return value if isinstance(value, int) and not isinstance(value, bool) \
            and value > 1 else None
    return found


YARN_EXAMPLE = {"rope_scaling": {"type": "yarn", "factor": 4.0,
                                 "original_max_position_embeddings": 64}}

FIELDS: tuple[FieldRule, ...] = (
    # ---- what the file is
    FieldRule("model_type", HONOURED, "which transformers config class vLLM builds the draft's "
              "config with, and so the values it fills where config.json leaves q_lora_rank "
              "or num_hidden_layers out (FILLED_BY_TRANSFORMERS); llama: a Llama-architecture "
              "draft, vLLM's own to serve", example={"model_type": "deepseek_v2",
                                                     "num_hidden_layers": LEFT_OUT},
              against={"num_hidden_layers": LEFT_OUT}),
    # ---- the attention's shape
    FieldRule("hidden_size", HONOURED, "the draft's width; every tensor's shape is checked "
              "against it (draft_spec, checkpoint)", example={"hidden_size": 128}),
    FieldRule("target_hidden_size", HONOURED, "the width of the captured states fc reads "
              "(draft_spec)", example={"target_hidden_size": 512}),
    FieldRule("num_attention_heads", HONOURED, "the MLA heads (draft_spec, the plugin's "
              "class)", example={"num_attention_heads": 2}),
    FieldRule("q_lora_rank", HONOURED, "q's low-rank projection and its q_a_layernorm; null "
              "or absent: q projected at full rank (draft_spec). Absent, transformers fills "
              "its model_type's default (1536 for DeepSeek-V2/V3 and kimi_k2), and written "
              "null, vLLM's class cannot load the draft: vLLM's class is refused either way "
              "(draft_class.IN_TREE_GAPS)", example={"q_lora_rank": 32}),
    FieldRule("kv_lora_rank", HONOURED, "the latent KV width (draft_spec)",
              example={"kv_lora_rank": 256}),
    FieldRule("qk_nope_head_dim", HONOURED, "draft_spec", example={"qk_nope_head_dim": 64}),
    FieldRule("qk_rope_head_dim", HONOURED, "draft_spec", example={"qk_rope_head_dim": 32}),
    FieldRule("v_head_dim", HONOURED, "draft_spec", example={"v_head_dim": 64}),
    FieldRule("intermediate_size", HONOURED, "the MLP's width (draft_spec)",
              example={"intermediate_size": 256}),
    FieldRule("hidden_act", HONOURED, "silu, the one activation of vLLM's DeepSeek MLP; "
              "any other is refused by draft_spec, naming it", example={"hidden_act": "gelu"}),
    FieldRule("rms_norm_eps", HONOURED, "every norm of the draft (draft_spec; vLLM's MLA "
              "attention reads the same field for q_a_layernorm and kv_a_layernorm)",
              example={"rms_norm_eps": 1e-5}),
    FieldRule("num_key_value_heads", NO_EFFECT, "MLA keeps one latent KV head; the key "
              "and value heads come from kv_lora_rank", example={"num_key_value_heads": 1}),
    FieldRule("head_dim", NO_EFFECT, "an MLA draft's head sizes are qk_nope_head_dim, "
              "qk_rope_head_dim and v_head_dim, which vLLM passes explicitly",
              example={"head_dim": 32}),
    FieldRule("attention_dropout", NO_EFFECT, "dropout acts in training only",
              example={"attention_dropout": 0.1}),
    FieldRule("attention_bias", REFUSED, "vLLM's MLA attention has no biases, and the draft "
              "was trained with them; " + NOTHING_IN_VLLM, _true(_top("attention_bias")),
              example={"attention_bias": True}, when="true", mla_only=True),
    FieldRule("mla_use_output_gate", HONOURED, "the K3 output gate g_proj (the plugin's "
              "class, on vLLM releases whose MLA attention applies one; refused on older "
              "ones)", example={"mla_use_output_gate": True}),
    FieldRule("index_topk", REFUSED, "vLLM's MLA attention builds DeepSeek-V3.2's sparse "
              "indexer wherever the key is written (null included), whose weights no EAGLE3 "
              "draft has, and would pick keys with uninitialised weights; remove the key; "
              + NOTHING_IN_VLLM, _written("index_topk"), example={"index_topk": 2048},
              when="written, null included", mla_only=True),
    # ---- positions and rope
    FieldRule("mla_use_nope", HONOURED, "whether the rope dims are rotated (draft_positions; "
              "the plugin's class only)", example={"mla_use_nope": True}),
    FieldRule("mla_use_nope_measured", HONOURED, "true: mla_use_nope is read as written, "
              "over a training tool's fingerprint (calibrate --write writes both)",
              example={"mla_use_nope": True, "_torchspec_version": "0.1",
                       "mla_use_nope_measured": True},
              against={"mla_use_nope": True, "_torchspec_version": "0.1"}),
    FieldRule("rope_theta", HONOURED, "the rope base, unless VLLM_KIMI_EAGLE_DRAFT_ROPE_THETA "
              "names another (rope_override); two different bases are refused",
              example={"rope_theta": 10000.0}),
    FieldRule("rope_theta (null)", REFUSED, "with no base in a rope block, transformers "
              "hands the null to vLLM's rope, while a missing base is 10000; write the base "
              "the draft was trained with", _null_rope_theta, example={"rope_theta": None},
              when="null", rope_only=True),
    FieldRule("rope_scaling / rope_parameters (type, factor, "
              "original_max_position_embeddings, beta_fast, beta_slow, mscale, "
              "mscale_all_dim)", HONOURED, "default and yarn as written; other types are "
              "refused (vLLM's MLA attention turns them into DeepSeek YaRN); two blocks "
              "saying different things are refused", example=YARN_EXAMPLE,
              keys=(*ROPE_BLOCKS, "type", "rope_type", "factor",
                    "original_max_position_embeddings", "beta_fast", "beta_slow", "mscale",
                    "mscale_all_dim")),
    FieldRule("rope_scaling.attention_factor", REFUSED, "with yarn, 1.0 makes vLLM's MLA "
              "attention serve DeepSeek's llama scaling, without yarn's softmax factor "
              "(mscale squared), which the MLA draft trainers apply, and any other value is "
              "dropped: vLLM's DeepSeek YaRN rope takes no attention_factor (it scales by "
              "mscale and mscale_all_dim); remove the field if the draft was trained with "
              "yarn's own factor", _yarn_attention_factor,
              example={"rope_scaling": {**YARN_EXAMPLE["rope_scaling"],
                                        "attention_factor": 1.0}},
              when="any value, with yarn", rope_only=True, mla_only=True),
    FieldRule("rope_scaling.truncate", REFUSED, "with yarn: the draft was trained with yarn's "
              "correction range left fractional, while vLLM's DeepSeek YaRN rope always "
              "rounds it to whole dims; " + NOTHING_IN_VLLM, _yarn_untruncated,
              example={"rope_scaling": {**YARN_EXAMPLE["rope_scaling"], "truncate": False}},
              when="false, with yarn", rope_only=True, mla_only=True),
    FieldRule("rope_scaling.mrope_section / mrope_interleaved / use_fope", REFUSED, "keys that "
              "make vLLM build another rope class (M-RoPE, Fourier RoPE) for a default rope, "
              "and that its DeepSeek YaRN rope drops; an MLA draft is trained with neither; "
              + NOTHING_IN_VLLM, _rope_class_keys,
              example={"rope_scaling": {"type": "default", "mrope_section": [16, 8, 8]}},
              keys=ROPE_CLASS_KEYS, when="written", rope_only=True, mla_only=True),
    FieldRule("rope_scaling.apply_yarn_scaling", REFUSED, "yarn's softmax factor is left out "
              "on vLLM 0.28, and the MLA draft trainers apply it; remove the field if the "
              "draft was trained with it", _yarn_scaling_off,
              example={"rope_scaling": {**YARN_EXAMPLE["rope_scaling"],
                                        "apply_yarn_scaling": False}},
              when="false", rope_only=True, mla_only=True),
    FieldRule("partial_rotary_factor", REFUSED, "vLLM rotates that share of the rope dims, "
              "the MLA draft trainers (TorchSpec, SpecForge) all of them, so nothing tells "
              "which the draft was trained with; " + NOTHING_IN_VLLM + " as two readings",
              _partial_rotary, example={"partial_rotary_factor": 0.5}, when="other than 1",
              rope_only=True, mla_only=True),
    FieldRule("rope_scaling.rope_dim", REFUSED, "vLLM rotates that many rope dims instead "
              "of qk_rope_head_dim; " + NOTHING_IN_VLLM + " as two readings", _rope_dim,
              example={"rope_scaling": {"type": "default", "rope_dim": 32}},
              when="other than qk_rope_head_dim", rope_only=True, mla_only=True),
    FieldRule("rope_interleave", REFUSED, "the draft was trained rotating the two halves of "
              "the rope dims (NeoX), while vLLM's MLA attention always rotates interleaved "
              "pairs, DeepSeek's layout; " + NOTHING_IN_VLLM,
              _false(_top("rope_interleave")), example={"rope_interleave": False},
              when="false", rope_only=True, mla_only=True),
    FieldRule("max_position_embeddings", HONOURED, "the rotary cache's length and, for "
              "yarn, original_max_position_embeddings where the block leaves it out",
              example={"max_position_embeddings": 4096}),
    FieldRule("max_position_embeddings (yarn, null)", REFUSED, "a yarn rope without "
              "original_max_position_embeddings and without max_position_embeddings is "
              "filled with transformers' default 4096, which the draft may not have been "
              "trained with; write original_max_position_embeddings",
              _yarn_fill_unwritten, example={"rope_scaling": {"type": "yarn", "factor": 4.0},
                                             "max_position_embeddings": None},
              when="null or not written, with yarn and no original_max_position_embeddings",
              rope_only=True),
    # ---- the attention window
    FieldRule("sliding_window", REFUSED, "vLLM's MLA attention applies no window (none of "
              "its MLA backends has one), so the draft would attend beyond the window it "
              "was trained with; " + NOTHING_IN_VLLM + " (RTP-LLM's "
              "Eagle3DeepseekV2SWAForCausalLM does). Where use_sliding_window is false, "
              "no window applies and the field is read as such", _window,
              example={"sliding_window": 16, "use_sliding_window": True}, when="positive",
              mla_only=True),
    FieldRule("use_sliding_window", NO_EFFECT, "without a positive sliding_window there is "
              "no window to use (see sliding_window)", example={"use_sliding_window": True}),
    FieldRule("layer_types", REFUSED, "a layer other than full_attention (a sliding window) "
              "is served with full attention by vLLM's MLA attention; " + NOTHING_IN_VLLM,
              _windowed_layers, example={"layer_types": ["sliding_attention"]},
              when="a layer other than full_attention", mla_only=True),
    # ---- the EAGLE3 structure
    FieldRule("eagle_aux_hidden_state_layer_ids (and its _convention)", HONOURED,
              "the target layers vLLM captures (layer_ids)",
              example={"eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 4]}},
              keys=("eagle_aux_hidden_state_layer_ids",
                    "eagle_aux_hidden_state_layer_ids_convention")),
    FieldRule("num_aux_hidden_states", HONOURED, "how many captured states fc reads; "
              "checked against the ids", example={"num_aux_hidden_states": 2}),
    FieldRule("fc_norm / use_aux_norm", HONOURED, "EAGLE3.1's norm of each captured state "
              "before fc (draft_spec)", example={"fc_norm": True},
              keys=("fc_norm", "use_aux_norm")),
    FieldRule("norm_output", HONOURED, "EAGLE3.1: later steps read the normed state",
              example={"norm_output": True}),
    FieldRule("norm_before_residual", HONOURED, "the residual taken after hidden_norm",
              example={"norm_before_residual": True}),
    FieldRule("eagle_config.use_input_layernorm_in_first_layer", HONOURED, "hidden_norm "
              "on or off", example={"eagle_config": {"use_input_layernorm_in_first_layer":
                                                     False}}),
    FieldRule("eagle_config.use_last_layernorm", HONOURED, "the final norm on or off",
              example={"eagle_config": {"use_last_layernorm": False}}),
    FieldRule("eagle_config.use_mtp_layernorm", REFUSED, "EAGLE-1/MTP norms of the "
              "embedding and hidden state before fc; an EAGLE3 draft with captured target "
              "states has none (Model-Optimizer does not build them for EAGLE3); "
              + NOTHING_IN_VLLM, _true(_nested("use_mtp_layernorm")),
              example={"eagle_config": {"use_mtp_layernorm": True}}, when="true"),
    FieldRule("eagle_config.use_aux_hidden_state", REFUSED, "the draft reads no captured "
              "target states (EAGLE-1), while vLLM's EAGLE3 proposer feeds it three; serve it "
              "as an EAGLE draft (method eagle), not eagle3",
              _false(_nested("use_aux_hidden_state")),
              example={"eagle_config": {"use_aux_hidden_state": False}}, when="false"),
    FieldRule("norm_before_fc", REFUSED, "a norm of the captured states before fc that the "
              "MLA draft classes (the plugin's and vLLM's) do not build; " + NOTHING_IN_VLLM,
              _true(_nested("norm_before_fc")), example={"norm_before_fc": True}, when="true",
              mla_only=True),
    FieldRule("eagle_config.parallel_draft_step", REFUSED, "Model-Optimizer's parallel "
              "drafting heads, which vLLM's EAGLE3 proposer does not run; " + NOTHING_IN_VLLM,
              _above_one(_nested("parallel_draft_step")),
              example={"eagle_config": {"parallel_draft_step": 3}}, when="above 1"),
    FieldRule("num_hidden_layers", REFUSED, "the plugin's class builds one decoder layer, "
              "and every EAGLE3 MLA trainer trains one (a config with many layers is a "
              "target's: check the speculative config's model, or export the draft with one "
              "layer). Absent or null, the plugin's class is not affected; vLLM's class "
              "builds transformers' default of the model_type (DeepSeek-V3's 61), so the "
              "plugin refuses it there (draft_class.IN_TREE_GAPS)",
              _above_one(_top("num_hidden_layers")), example={"num_hidden_layers": 2},
              when="above 1", mla_only=True),
    FieldRule("use_moe", REFUSED, "a mixture-of-experts draft layer, while the MLA draft "
              "classes build one dense MLP; " + NOTHING_IN_VLLM,
              _true(_top("use_moe")), example={"use_moe": True}, when="true", mla_only=True),
    FieldRule("n_routed_experts, first_k_dense_replace, moe_* and the target's other MoE "
              "fields", NO_EFFECT, "the draft's one layer is a dense MLP in both classes; "
              "a MoE checkpoint's expert tensors are refused by name",
              example={"n_routed_experts": 8, "first_k_dense_replace": 3},
              keys=("n_routed_experts", "first_k_dense_replace", "moe_intermediate_size",
                    "moe_layer_freq", "n_shared_experts", "num_experts_per_tok", "n_group",
                    "topk_group", "topk_method", "routed_scaling_factor", "scoring_func",
                    "norm_topk_prob", "aux_loss_alpha", "seq_aux", "ep_size",
                    "num_nextn_predict_layers")),
    # ---- vocabulary, head, logits
    FieldRule("vocab_size", HONOURED, "checked against the target's and the checkpoint's",
              example={"vocab_size": 1024}),
    FieldRule("draft_vocab_size", HONOURED, "the pruned vocabulary, mapped by d2t",
              example={"draft_vocab_size": 256}),
    FieldRule("logit_scale", HONOURED, "the draft's logits are multiplied by it, as vLLM's "
              "LogitsProcessor does in both classes (and the reference)",
              example={"logit_scale": 2.0}),
    FieldRule("tie_word_embeddings", NO_EFFECT, "the draft's lm_head is its own tensor, or "
              "where the checkpoint has none the target's, which vLLM shares; never tied to "
              "the draft's embedding", example={"tie_word_embeddings": True}),
    # ---- dtype and quantization
    FieldRule("torch_dtype / dtype", NO_EFFECT, "vLLM serves the draft in the target's "
              "dtype", example={"torch_dtype": "bfloat16"}, keys=("torch_dtype", "dtype")),
    FieldRule("quantization_config (or hf_quant_config.json, compression_config)", HONOURED,
              "the scheme is read, its scales checked and loaded (quantization)",
              example={"quantization_config": {"quant_method": "fp8",
                                                "weight_block_size": [128, 128]}},
              keys=("quantization_config", "hf_quant_config.json", "compression_config")),
)


# Fields transformers fills with a value of its own where config.json leaves them out,
# while the plugin's record reads them as absent: vLLM's class builds from transformers'
# value (draft_class.IN_TREE_GAPS refuses it), the plugin's from the record. The value is
# the default of the config class vLLM builds for the draft's model_type
# (transformers_utils/config.py maps kimi_k2 and deepseek_v32 to DeepseekV3Config; read in
# transformers 5.19, tests/integration/test_config_alias.py reads them from the installed one).
TRANSFORMERS_CONFIG_CLASS = {"kimi_k2": "DeepseekV3Config", "deepseek_v3": "DeepseekV3Config",
                             "deepseek_v32": "DeepseekV3Config",
                             "deepseek_v2": "DeepseekV2Config"}
FILLED_BY_TRANSFORMERS = {"DeepseekV3Config": {"q_lora_rank": 1536, "num_hidden_layers": 61},
                          "DeepseekV2Config": {"q_lora_rank": 1536, "num_hidden_layers": 32}}


FILLED_FIELDS = ("q_lora_rank", "num_hidden_layers")


def unwritten(raw: Mapping[str, Any]) -> dict[str, int | None]:
    """The fields transformers fills that ``raw`` leaves out (a null is written), each with
    the value the config class of its model_type fills in (None: a model_type vLLM builds
    no DeepSeek config class for, whose default is not known here)."""
    model_type = raw.get("model_type")
    config_class = TRANSFORMERS_CONFIG_CLASS.get(model_type if isinstance(model_type, str)
                                                 else None)
    filled = FILLED_BY_TRANSFORMERS.get(config_class, {})
    return {key: filled.get(key) for key in FILLED_FIELDS if key not in raw}


# Keys a draft's config.json carries that no draft class reads: what they are for.
NOT_READ = {
    "architectures": "which class vLLM builds: the plugin reads it to know the draft "
    "(draft_spec.MLA_ARCHITECTURES)",
    "bos_token_id, eos_token_id, pad_token_id, sep_token_id": "the tokenizer's ids: the "
    "target's generation config decides them",
    "transformers_version, _torchspec_version, initializer_range, use_cache, "
    "pretraining_tp, torchscript, use_bfloat16, return_dict, output_attentions, "
    "output_hidden_states, is_decoder, is_encoder_decoder, tie_encoder_decoder, "
    "pruned_heads, id2label, label2id, chunk_size_feed_forward, tf_legacy_loss": "how "
    "the file or the training run was made",
    "do_sample, temperature, top_k, top_p, typical_p, num_beams, num_beam_groups, "
    "diversity_penalty, repetition_penalty, length_penalty, no_repeat_ngram_size, "
    "encoder_no_repeat_ngram_size, max_length, min_length, early_stopping, "
    "num_return_sequences, output_scores, return_dict_in_generate, remove_invalid_values, "
    "forced_bos_token_id, forced_eos_token_id": "transformers' generation settings: vLLM "
    "takes sampling from the request",
    "eagle_config": "a block: its fields are rows of the table",
    "eagle_config.next_layer_regular, eagle_config.parallel_draft_heads_num_layers":
    "Model-Optimizer's recipe; with parallel_draft_step 1 they build nothing",
}


def not_read_keys() -> frozenset[str]:
    return frozenset(key.split(".")[-1] for keys in NOT_READ for key in keys.split(", "))


def covered_keys() -> frozenset[str]:
    """Every key the table or NOT_READ speaks for."""
    return frozenset(k for rule in FIELDS for k in rule.config_keys) | not_read_keys()


def is_mla(raw: Mapping[str, Any]) -> bool:
    """Whether config.json describes an MLA draft (a latent KV width), as the classes
    read it: a draft without one is served by vLLM's own (Llama) class."""
    return raw.get("kv_lora_rank") is not None


def refusals(raw: Mapping[str, Any], rope_only: bool = False) -> tuple[str, ...]:
    """One line per refused field ``raw`` carries: the field, the value found, why and
    what would serve the draft. ``rope_only``: the rows about rotating the rope dims (no
    refusal where the draft is served unrotated), else the others; rows about vLLM's MLA
    attention only for an MLA draft."""
    lines = []
    for rule in FIELDS:
        if rule.action != REFUSED or rule.rope_only != rope_only \
                or (rule.mla_only and not is_mla(raw)):
            continue
        value = rule.found(raw)
        if value is not None:
            lines.append(f"field {rule.name!r} is {_shown(value)}: {rule.words}")
    return tuple(lines)


def table() -> str:
    """FIELDS as the markdown table docs/checkpoints.md prints."""
    lines = ["| field | what the plugin does | where, or why |", "|---|---|---|"]
    for rule in FIELDS:
        words = f"{rule.when}: {rule.words}" if rule.when else rule.words
        if rule.rope_only:
            words += " (not where the rope dims are served unrotated: NoPE)"
        lines.append(f"| `{rule.field}` | {rule.action} | {words} |")
    return "\n".join(lines)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value if isinstance(value, str) else repr(value)
