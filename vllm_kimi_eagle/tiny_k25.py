"""A tiny Kimi-K2.5-shaped target: the tiny ``kimi_k2`` target inside the multimodal
``KimiK25ForConditionalGeneration`` layout that the real K2.5/K2.6 checkpoints use.

``write_k25_target(target, folder)`` writes, from a built tiny ``target/`` folder:

- ``config.json``: ``model_type: kimi_k25`` with the target's config.json as
  ``text_config`` (unchanged: 6 layers, hidden 256, vocab 512), a tiny MoonViT
  ``vision_config`` and the media token ids; ``auto_map`` names the config class shipped
  beside it, as the real checkpoint does (load with ``--trust-remote-code``);
- ``configuration_kimi_k25.py``, ``kimi_k25_processor.py``,
  ``kimi_k25_vision_processing.py`` and ``preprocessor_config.json``: our own code for the
  files the real checkpoint ships. vLLM reads the config through its own registry and
  uses its own processor (it never runs these); transformers and other tools load them;
- a tokenizer that is the target's with five reserved ids renamed to the media tokens
  and to ``image`` (the placeholder vLLM writes for an image is
  ``<|media_begin|>image<|media_content|><|media_pad|><|media_end|>``): every text id
  keeps its meaning, so the language model's weights are the target's, unchanged;
- ``model.safetensors``: the target's tensors under ``language_model.``, plus a seeded
  random two-block vision tower and projector (never trained: images are new to this
  language model; lossless decoding does not need them to mean anything).

Every draft trained on the tiny target applies to this one unchanged.
"""

from __future__ import annotations

import json
import os
import shutil

K25_SEED = 20261125
# Reserved ids of tiny_corpus.vocabulary() (the last five) renamed for the media tokens.
MEDIA_TOKENS = {
    "image": 507,
    "<|media_begin|>": 508,
    "<|media_content|>": 509,
    "<|media_end|>": 510,
    "<|media_pad|>": 511,
}
MEDIA_PAD = "<|media_pad|>"
# Shaped like the real MoonViT (patch 14, 2x2 merge, 4-frame chunks), only small.
VISION = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "intermediate_size": 128}
VISION_CONFIG = {
    **VISION,
    # The real checkpoint's remote-code names of the same four fields.
    **{f"vt_{k}": v for k, v in VISION.items()},
    "model_type": "kimi_k25_vision",
    "patch_size": 14, "merge_kernel_size": [2, 2], "merge_type": "sd2_tpool",
    "pos_emb_height": 16, "pos_emb_width": 16, "pos_emb_time": 4,
    "init_pos_emb_height": 16, "init_pos_emb_width": 16, "init_pos_emb_time": 4,
    "hidden_act": "gelu_pytorch_tanh", "video_attn_type": "spatial_temporal",
    "mm_projector_type": "patchmerger", "mm_hidden_size": VISION["hidden_size"],
}
# Images up to 16x16 patches of 14 px (64 tokens after the 2x2 merge).
MEDIA_PROC_CFG = {
    "patch_size": 14, "merge_kernel_size": 2, "temporal_merge_kernel_size": 4,
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "in_patch_limit": 256, "patch_limit_on_one_side": 16, "fixed_output_tokens": None,
    "in_patch_limit_each_frame": 256, "in_patch_limit_video": None,
    "sample_fps": 2.0, "max_num_frames_each_video": None, "timestamp_mode": "hh:mm:ss.fff",
}
REMOTE_CODE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "k25_checkpoint_files")
REMOTE_CODE_FILES = ("configuration_kimi_k25.py", "kimi_k25_processor.py",
                     "kimi_k25_vision_processing.py")


def k25_config(text_config: dict) -> dict:
    """config.json of the K2.5-shaped target around a text (kimi_k2) config."""
    pad = MEDIA_TOKENS[MEDIA_PAD]
    return {
        "architectures": ["KimiK25ForConditionalGeneration"],
        "model_type": "kimi_k25",
        "auto_map": {"AutoConfig": "configuration_kimi_k25.KimiK25Config"},
        "text_config": text_config,
        "vision_config": dict(VISION_CONFIG, text_hidden_size=text_config["hidden_size"]),
        # The real checkpoint's remote code reads media_placeholder_token_id; vLLM
        # (through transformers' Kimi_K25Config) reads image_token_id.
        "media_placeholder_token_id": pad,
        "image_token_id": pad,
        "use_unified_vision_chunk": True,
        "video_placeholder": "<|kimi_k25_video_placeholder|>",
        "bos_token_id": text_config.get("bos_token_id"),
        "eos_token_id": text_config.get("eos_token_id"),
        "pad_token_id": text_config.get("pad_token_id"),
        "tie_word_embeddings": False,
        "dtype": "float32", "torch_dtype": "float32",
    }


def vision_tensor_shapes(config: dict) -> dict[str, tuple[int, ...]]:
    """Names and shapes of the vision tower and projector tensors, as vLLM's
    KimiK25ForConditionalGeneration loads them (projector in the checkpoint's
    ``proj.0``/``proj.2`` names, which vLLM renames to ``linear_1``/``linear_2``)."""
    v = config["vision_config"]
    h, m, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    merged = h * v["merge_kernel_size"][0] * v["merge_kernel_size"][1]
    shapes = {
        "vision_tower.patch_embed.proj.weight": (h, 3, p, p),
        "vision_tower.patch_embed.proj.bias": (h,),
        "vision_tower.patch_embed.pos_emb.weight": (v["pos_emb_height"], v["pos_emb_width"], h),
        "vision_tower.encoder.final_layernorm.weight": (h,),
        "vision_tower.encoder.final_layernorm.bias": (h,),
        "mm_projector.pre_norm.weight": (h,),
        "mm_projector.pre_norm.bias": (h,),
        "mm_projector.proj.0.weight": (merged, merged),
        "mm_projector.proj.0.bias": (merged,),
        "mm_projector.proj.2.weight": (config["text_config"]["hidden_size"], merged),
        "mm_projector.proj.2.bias": (config["text_config"]["hidden_size"],),
    }
    for i in range(v["num_hidden_layers"]):
        block = f"vision_tower.encoder.blocks.{i}."
        shapes.update({
            block + "norm0.weight": (h,), block + "norm0.bias": (h,),
            block + "norm1.weight": (h,), block + "norm1.bias": (h,),
            block + "wqkv.weight": (3 * h, h), block + "wqkv.bias": (3 * h,),
            block + "wo.weight": (h, h), block + "wo.bias": (h,),
            block + "mlp.fc0.weight": (m, h), block + "mlp.fc0.bias": (m,),
            block + "mlp.fc1.weight": (h, m), block + "mlp.fc1.bias": (h,),
        })
    return shapes


def vision_tensors(config: dict, seed: int = K25_SEED) -> dict:
    """Seeded random vision tensors: norms 1/0, biases 0, matrices N(0, 0.02)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in sorted(vision_tensor_shapes(config).items()):
        if "norm" in name:
            out[name] = (torch.ones if name.endswith("weight") else torch.zeros)(shape)
        elif name.endswith("bias"):
            out[name] = torch.zeros(shape)
        else:
            out[name] = torch.randn(shape, generator=g) * 0.02
    return out


def write_k25_tokenizer(folder: str):
    """The tiny tokenizer with MEDIA_TOKENS on their reserved ids (media tokens special)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from vllm_kimi_eagle import tiny_corpus, tiny_models

    words = tiny_corpus.vocabulary()
    for word, i in MEDIA_TOKENS.items():
        if not words[i].startswith("<reserved_"):
            raise ValueError(f"tiny_k25.MEDIA_TOKENS: id {i} for {word!r} is the tiny "
                             f"vocabulary's {words[i]!r}, not a reserved id; pick a free one")
        words[i] = word
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    media = [w for w in MEDIA_TOKENS if w.startswith("<|")]
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="<unk>", pad_token="<pad>", bos_token="<|bos|>",
        eos_token="<|eos|>", extra_special_tokens=media,
        model_max_length=tiny_models.TARGET_CONFIG["max_position_embeddings"],
    )
    tokenizer.chat_template = tiny_corpus.CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return tokenizer


def write_k25_target(target: str, folder: str) -> str:
    """Write the K2.5-shaped target into ``folder`` from the built tiny ``target``."""
    from safetensors.torch import load_file, save_file

    with open(os.path.join(target, "config.json")) as f:
        text_config = json.load(f)
    tmp = folder.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    config = k25_config(text_config)
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    with open(os.path.join(tmp, "preprocessor_config.json"), "w") as f:
        json.dump({"auto_map": {
            "AutoImageProcessor": "kimi_k25_vision_processing.KimiK25VisionProcessor",
            "AutoProcessor": "kimi_k25_processor.KimiK25Processor"},
            "media_proc_cfg": MEDIA_PROC_CFG}, f, indent=2)
    for name in REMOTE_CODE_FILES:
        shutil.copyfile(os.path.join(REMOTE_CODE_DIR, name), os.path.join(tmp, name))
    if os.path.exists(os.path.join(target, "generation_config.json")):
        shutil.copyfile(os.path.join(target, "generation_config.json"),
                        os.path.join(tmp, "generation_config.json"))
    write_k25_tokenizer(tmp)
    tensors = {("language_model." + k): v for k, v in
               load_file(os.path.join(target, "model.safetensors")).items()}
    tensors.update(vision_tensors(config))
    save_file({k: v.contiguous() for k, v in tensors.items()},
              os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(tmp, folder)
    return folder
