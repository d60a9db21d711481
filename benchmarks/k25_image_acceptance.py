"""Acceptance on prompts with an image, on the tiny K2.5-shaped target.

    PYTHONPATH=. .venv/bin/python benchmarks/k25_image_acceptance.py [--prompts 32]

Four real engines (tests/engine_run.py, one after the other, about 1.5 min each on 2
cores) on ``target-k25`` with the same instructions, each with one image (84-196 px per
side, 9 to 42 image tokens), 64 greedy tokens each:

- ``served``: the draft as vLLM serves it today (text-only draft inputs at image
  positions: the embedding of ``<|media_pad|>``);
- ``mm_embeddings``: the draft given the target's image embeddings at image positions
  (tests/engine_run.py KIMI_EAGLE_TEST_DRAFT_MM_EMBEDDINGS=1: the class declares
  SupportsMultiModalEmbeddings and merges them, as vLLM's mistral_large_3_eagle does);
- ``no_draft``: the lossless reference for both;
- ``text``: the same instructions without images (--language-model-only).

Prints one JSON object: acceptance per run and whether the greedy outputs match the
reference. A figure, not a test.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.engines import MULTIPROCESS  # noqa: E402
from tests.helpers import run_engine  # noqa: E402
from vllm_kimi_eagle.fixtures import corpus, k25 as tiny_k25  # noqa: E402
from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    tiny = ensure_tiny_models()
    k25 = os.path.join(tiny, "target-k25")
    if not os.path.exists(os.path.join(k25, "model.safetensors")):
        tiny_k25.write_k25_target(os.path.join(tiny, "target"), k25)
    texts = corpus.demo_prompts(args.prompts, seed=4321)
    images = [{"text": t, "image": {"width": 84 + 28 * (i % 5), "height": 84 + 28 * (i % 4),
                                    "seed": 100 + i}} for i, t in enumerate(texts)]
    base = {"target": k25, "trust_remote_code": True, "max_tokens": args.max_tokens,
            "dtype": "float32",  # as the tests: greedy comparisons free of bf16 ties
            "draft": os.path.join(tiny, "draft"), "prompts": [], "image_prompts": images}
    runs = {
        "served": (base, {}),
        "mm_embeddings": (base, {"KIMI_EAGLE_TEST_DRAFT_MM_EMBEDDINGS": "1"}),
        "no_draft": (dict(base, draft=None), {}),
        "text": (dict(base, prompts=texts, image_prompts=[], language_model_only=True), {}),
    }
    results = {}
    for name, (spec, env) in runs.items():
        result = run_engine(spec, env={**MULTIPROCESS, **env})
        if "error" in result:
            raise SystemExit(f"{name}: {result['error']}\n{result['_stderr']}")
        results[name] = result.get("image") or result
        print(f"{name}: done", file=sys.stderr)
    reference = results["no_draft"]["token_ids"]
    pad = tiny_k25.MEDIA_TOKENS["<|media_pad|>"]
    summary = {
        "prompts": args.prompts, "max_tokens": args.max_tokens,
        "image_tokens": sum(ids.count(pad) for ids in results["served"]["prompt_token_ids"]),
    }
    for name in ("served", "mm_embeddings", "text"):
        r = results[name]
        summary[name] = {k: r[k] for k in ("acceptance_length", "acceptance_by_position",
                                           "drafts", "draft_tokens", "accepted_tokens")}
        if name != "text":
            summary[name]["identical_to_no_draft"] = r["token_ids"] == reference
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
