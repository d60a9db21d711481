"""One trained draft written the way each training tool writes its MLA EAGLE3 exports.

Users bring drafts exported by NVIDIA Model-Optimizer, TorchSpec and SpecForge, not by
our tiny trainer. These writers take the tensors and config of one draft (canonical
names: ``layers.0.``, no ``model.``) and lay them out as each tool does, so the tests can
serve the same weights through every export and compare acceptance. What each tool
writes was read in its public sources (cited per writer); vLLM's speculators writes no
MLA draft (its EAGLE3 decoder layers are Llama/Qwen only), so it has no writer here.

Pure functions from (tensors, config) to (config, tensors, safetensors metadata); the
builder in ``tiny_models.py`` saves them.
"""

from __future__ import annotations

import copy

TORCHSPEC_VERSION = "0.0.0-tiny"  # what our TorchSpec-shaped exports claim to be
# Keys of Model-Optimizer's Kimi-K2 template (hf_spec_export.py,
# kimik2_eagle_template_config) besides architectures/model_type/eagle_config: each is
# filled from the eagle config, else the base model's config, else written as null.
MODELOPT_KIMI_KEYS = (
    "attention_bias", "attention_dropout", "aux_loss_alpha", "bos_token_id",
    "chunk_size_feed_forward", "diversity_penalty", "do_sample", "early_stopping",
    "encoder_no_repeat_ngram_size", "eos_token_id", "ep_size", "first_k_dense_replace",
    "forced_bos_token_id", "forced_eos_token_id", "hidden_act", "hidden_size", "id2label",
    "initializer_range", "intermediate_size", "is_decoder", "is_encoder_decoder",
    "kv_lora_rank", "label2id", "length_penalty", "max_length", "max_position_embeddings",
    "min_length", "moe_intermediate_size", "moe_layer_freq", "n_group", "n_routed_experts",
    "n_shared_experts", "no_repeat_ngram_size", "norm_topk_prob", "num_attention_heads",
    "num_beam_groups", "num_beams", "num_experts_per_tok", "num_hidden_layers",
    "num_key_value_heads", "num_nextn_predict_layers", "num_return_sequences",
    "output_attentions", "output_hidden_states", "output_scores", "pad_token_id",
    "pretraining_tp", "pruned_heads", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
    "remove_invalid_values", "repetition_penalty", "return_dict", "return_dict_in_generate",
    "rms_norm_eps", "rope_scaling", "rope_theta", "routed_scaling_factor", "scoring_func",
    "sep_token_id", "seq_aux", "temperature", "tf_legacy_loss", "tie_encoder_decoder",
    "tie_word_embeddings", "top_k", "top_p", "topk_group", "topk_method", "torch_dtype",
    "torchscript", "transformers_version", "typical_p", "use_bfloat16", "use_cache",
    "v_head_dim", "vocab_size",
)
# Model-Optimizer's eagle_config block and the defaults of its EAGLE-3 recipe.
MODELOPT_EAGLE_CONFIG = {
    "use_aux_hidden_state": True, "use_input_layernorm_in_first_layer": True,
    "use_last_layernorm": True, "use_mtp_layernorm": False, "next_layer_regular": True,
    "parallel_draft_step": 1, "parallel_draft_heads_num_layers": 1,
}
IDS_KEY = "eagle_aux_hidden_state_layer_ids"


def _prefixed(tensors: dict, prefix: str) -> dict:
    """Canonical ``layers.0.`` names rewritten under another decoder-layer prefix."""
    return {(prefix + k[len("layers.0."):] if k.startswith("layers.0.") else k): v
            for k, v in tensors.items()}


def _identity_vocab_maps(vocab: int) -> dict:
    """d2t (all-zero offsets) and t2d (all True) of a draft that keeps the full vocabulary."""
    import torch

    return {"d2t": torch.zeros(vocab, dtype=torch.long), "t2d": torch.ones(vocab, dtype=torch.bool)}


def _output_of(capture_ids: list[int]) -> list[int]:
    """Captured layers (input of layer N, vLLM's meaning) as the trainers write them."""
    return [i - 1 for i in capture_ids]


def modelopt(tensors: dict, draft_config: dict, target_config, capture_ids: list[int],
             written_order: list[int] | None = None) -> tuple[dict, dict, dict]:
    """NVIDIA Model-Optimizer (modelopt/torch/export/plugins/hf_spec_export.py,
    export_spec_ckpt_config / export_spec_ckpt_state_dict, KIMIK2_EAGLE_SINGLE_LAYER):
    ``midlayer.*``, ``norm``, ``fc``, ``lm_head`` (always: the base model's when the draft
    has none), never ``embed_tokens``; d2t only with a smaller draft vocabulary. Ids only
    inside eagle_config, output-of, in the order the recipe gave them (``written_order``;
    its default goes through ``set()``). ``target_config`` is the base model's config
    object (or dict), as the tool reads it."""
    def filled(key):  # the tool reads attributes of the transformers config objects
        for source in (draft_config, target_config):
            value = source.get(key) if isinstance(source, dict) else getattr(source, key, None)
            if value is not None:
                return str(value).removeprefix("torch.") if key == "torch_dtype" else value
        return None

    config = {"architectures": ["Eagle3DeepseekV2ForCausalLM"], "model_type": "kimi_k2"}
    config.update({key: filled(key) for key in MODELOPT_KIMI_KEYS})
    config["num_hidden_layers"] = 1  # the eagle config's, not the base model's
    ids = written_order if written_order is not None else _output_of(capture_ids)
    config["eagle_config"] = {IDS_KEY: ids, **MODELOPT_EAGLE_CONFIG}
    out = {k: v for k, v in _prefixed(tensors, "midlayer.").items() if k != "embed_tokens.weight"}
    return config, out, {}


def torchspec(tensors: dict, draft_config: dict, target_config: dict, capture_ids: list[int],
              for_vllm: bool = False) -> tuple[dict, dict, dict]:
    """lightseekorg TorchSpec (tools/convert_to_hf.py): the draft's whole state dict,
    ``embed_tokens`` and ``lm_head`` included, with the d2t/t2d buffers (identity for a
    full vocabulary), ``midlayer.`` natively; ``--vllm`` renames to ``layers.0.`` and, for
    model_type kimi_k2, adds 1 to every id list (top level and eagle_config). The config
    carries ``_torchspec_version`` and the safetensors metadata ``torchspec_version``."""
    config = copy.deepcopy(draft_config)
    trained = _output_of(capture_ids)
    written = [i + 1 for i in trained] if for_vllm and config["model_type"] == "kimi_k2" else trained
    config[IDS_KEY] = written
    config["eagle_config"] = dict(config.get("eagle_config") or {}, **{IDS_KEY: written})
    config["draft_vocab_size"] = config["vocab_size"]
    config["_torchspec_version"] = TORCHSPEC_VERSION
    out = _prefixed(tensors, "layers.0." if for_vllm else "midlayer.")
    out.update(_identity_vocab_maps(config["vocab_size"]))
    return config, out, {"torchspec_version": TORCHSPEC_VERSION}


def specforge(tensors: dict, draft_config: dict, target_config: dict, capture_ids: list[int],
              ) -> tuple[dict, dict, dict]:
    """sgl-project SpecForge MLA draft (specforge/modeling/draft/deepseek_eagle3.py,
    ``DeepseekV3ForCausalLMEagle3`` on a DeepseekV3Config; scripts/train_eagle3.py saves
    it with save_pretrained and every tensor whose name holds "embed" dropped):
    ``midlayer.*``, ``fc``, ``norm``, ``lm_head``, ``t2d`` and ``d2t`` (identity for a full
    vocabulary), no ``embed_tokens``; model_type deepseek_v3; ids nested, output-of."""
    config = copy.deepcopy(draft_config)
    config.update(architectures=["DeepseekV3ForCausalLMEagle3"], model_type="deepseek_v3",
                  draft_vocab_size=config["vocab_size"])
    config["eagle_config"] = {IDS_KEY: _output_of(capture_ids), "use_aux_hidden_state": True}
    out = {k: v for k, v in _prefixed(tensors, "midlayer.").items() if "embed" not in k}
    out.update(_identity_vocab_maps(config["vocab_size"]))
    return config, out, {}


WRITERS = {
    "modelopt": modelopt,
    "torchspec": torchspec,
    "torchspec-vllm": lambda *args, **kw: torchspec(*args, for_vllm=True, **kw),
    "specforge": specforge,
}


def export(tool: str, tensors: dict, draft_config: dict, target_config: dict,
           capture_ids: list[int], **options) -> tuple[dict, dict, dict]:
    """(config, tensors, safetensors metadata) of the draft as ``tool`` writes it."""
    return WRITERS[tool](tensors, draft_config, target_config, capture_ids, **options)
