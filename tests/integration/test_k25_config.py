"""The tiny K2.5-shaped target without an engine: the folder, its remote code
next to vLLM's processor, vLLM's view of its config, inspect against it.

``target-k25`` is the tiny kimi_k2 target's language model inside the K2.5 layout (a tiny
MoonViT, the media tokens, config and processor through trust_remote_code), so the drafts
trained on the text-only target apply unchanged. Served: tests/e2e/test_k25_e2e.py.
"""

from __future__ import annotations

import pytest

import json
import os

from safetensors import safe_open

from tests.helpers import PROMPTS, run_cli, run_python
from vllm_kimi_eagle.fixtures import k25 as tiny_k25


def test_k25_target_wraps_the_text_target_unchanged(tiny, k25):
    with open(os.path.join(k25, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(tiny, "target", "config.json")) as f:
        text = json.load(f)
    assert config["architectures"] == ["KimiK25ForConditionalGeneration"]
    assert config["model_type"] == "kimi_k25"
    assert config["text_config"] == text
    assert config["auto_map"]["AutoConfig"] == "configuration_kimi_k25.KimiK25Config"
    for name in tiny_k25.REMOTE_CODE_FILES + ("preprocessor_config.json",):
        assert os.path.exists(os.path.join(k25, name)), name
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(k25)
    pad = tokenizer.convert_tokens_to_ids("<|media_pad|>")
    assert pad == config["image_token_id"] == config["media_placeholder_token_id"]
    # vLLM's image placeholder tokenizes to known tokens, the text around it as before.
    ids = tokenizer("<|media_begin|>image<|media_content|><|media_pad|><|media_end|>\n"
                    + PROMPTS[0], add_special_tokens=False)["input_ids"]
    assert tokenizer.unk_token_id not in ids and ids[3] == pad
    text_tokenizer = AutoTokenizer.from_pretrained(os.path.join(tiny, "target"))
    assert ids[5:] == text_tokenizer(PROMPTS[0], add_special_tokens=False)["input_ids"]
    # The language model is the text target's, tensor for tensor.
    with safe_open(os.path.join(tiny, "target", "model.safetensors"), "pt") as t, \
            safe_open(os.path.join(k25, "model.safetensors"), "pt") as k:
        lm = {n for n in k.keys() if n.startswith("language_model.")}
        assert lm == {"language_model." + n for n in t.keys()}
        for name in t.keys():
            assert k.get_tensor("language_model." + name).equal(t.get_tensor(name)), name
        vision = {n: tuple(k.get_slice(n).get_shape()) for n in k.keys() if n not in lm}
    assert vision == tiny_k25.vision_tensor_shapes(config)


def test_shipped_config_and_image_processor_agree_with_vllms(k25):
    """The remote-code files load in transformers, and our image processor cuts an image
    exactly as vLLM's own (fused) Kimi-K2.5 processor does: same grid, same tokens,
    same pixels; our processor repeats <|media_pad|> that many times."""
    result = run_python(f"""
        import json, numpy as np
        from PIL import Image
        from transformers import AutoConfig, AutoImageProcessor, AutoProcessor
        from vllm.transformers_utils.processors.kimi_k25_vision_fused import (
            KimiK25FusedVisionProcessor)
        config = AutoConfig.from_pretrained({k25!r}, trust_remote_code=True)
        try:
            ours = AutoImageProcessor.from_pretrained({k25!r}, trust_remote_code=True)
        except ImportError as err:  # transformers below 5.18 wants torchvision here
            if "Torchvision" not in str(err):
                raise
            import transformers
            print(json.dumps({{"skip": f"transformers {{transformers.__version__}}'s "
                              "AutoImageProcessor needs torchvision, which the CPU "
                              "venv leaves out (its CUDA build breaks imports)"}}))
            raise SystemExit(0)
        processor = AutoProcessor.from_pretrained({k25!r}, trust_remote_code=True)
        vllms = KimiK25FusedVisionProcessor.from_pretrained({k25!r})
        rng = np.random.default_rng(0)
        rows = []
        for w, h in [(112, 84), (168, 112), (500, 300), (30, 700)]:
            image = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
            item = {{"type": "image", "image": image, "uuid": None}}
            a, b = ours.preprocess([item]), vllms.preprocess([item])
            expanded = processor(text="<|media_pad|> count", images=[image])["input_ids"][0]
            rows.append({{"tokens": [ours.media_tokens_calculator(item),
                                      vllms.media_tokens_calculator(item),
                                      expanded.count({tiny_k25.MEDIA_TOKENS["<|media_pad|>"]})],
                          "grid": [a["grid_thws"].tolist(), b["grid_thws"].tolist()],
                          "max_diff": float((a["pixel_values"] - b["pixel_values"]).abs().max())}})
        print(json.dumps({{"layers": config.text_config.num_hidden_layers,
                           "vision_hidden": config.vision_config.hidden_size, "rows": rows}}))
    """)
    if "skip" in result:
        pytest.skip(result["skip"])
    assert result["layers"] == 6 and result["vision_hidden"] == 64
    for row in result["rows"]:
        assert row["tokens"][0] == row["tokens"][1] == row["tokens"][2] > 0, row
        assert row["grid"][0] == row["grid"][1], row
        assert row["max_diff"] < 1e-5, row


def test_vllm_reads_the_text_config_and_media_token(k25):
    """vLLM's view of target-k25: the config class of its own registry (vLLM's
    KimiK25Config up to 0.31, transformers' Kimi_K25Config from 0.32; never our remote
    code), the text config's 6 layers, the vision config's real sizes (not the class
    defaults, Kimi's 1152), the media token; --language-model-only turns multimodal
    inputs off."""
    result = run_python(f"""
        import json
        from vllm.config import ModelConfig
        from vllm.multimodal import MULTIMODAL_REGISTRY
        from vllm_kimi_eagle.compat.vllm_compat import supports_multimodal_inputs
        out = {{}}
        for lmo in (False, True):
            mc = ModelConfig(model={k25!r}, trust_remote_code=True, language_model_only=lmo)
            out[str(lmo)] = {{"config": type(mc.hf_config).__module__,
                             "layers": mc.get_total_num_hidden_layers(), "use_mla": mc.use_mla,
                             "vision_hidden": mc.hf_config.vision_config.hidden_size,
                             "mm_inputs": supports_multimodal_inputs(mc)}}
        out["media_token_id"] = MULTIMODAL_REGISTRY.get_processing_info(mc).media_token_id
        print(json.dumps(out))
    """)
    full, text_only = result["False"], result["True"]
    assert full == dict(text_only, mm_inputs=True)
    assert not full["config"].startswith("transformers_modules"), full
    assert full["layers"] == 6 and full["use_mla"]
    assert full["vision_hidden"] == tiny_k25.VISION["hidden_size"]
    assert text_only["mm_inputs"] is False
    assert result["media_token_id"] == tiny_k25.MEDIA_TOKENS["<|media_pad|>"]


def test_inspect_accepts_the_k25_target(tiny, k25):
    """`inspect --target` reads layers, hidden size and vocabulary from text_config: the
    same report as against the text-only target."""
    reports = {}
    for name, target in (("k25", k25), ("text", os.path.join(tiny, "target"))):
        proc = run_cli("inspect", os.path.join(tiny, "draft"), "--target", target, "--json",
                       timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        reports[name] = json.loads(proc.stdout)
    k25_report, text_report = reports["k25"], reports["text"]
    assert k25_report["target"] == dict(text_report["target"], path=k25)
    assert k25_report["target"]["num_hidden_layers"] == 6
    assert k25_report["capture_ids"] == text_report["capture_ids"] == [2, 3, 5]
    assert k25_report["problems"] == []
