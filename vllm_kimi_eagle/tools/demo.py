"""The tiny Kimi demo: vLLM's OpenAI server with and without the EAGLE3 MLA draft.

Builds (or reuses) the tiny models, serves the target with the draft, sends a handful of
greedy chat requests, then serves the target alone and sends the same requests. Prints
acceptance length and per-position acceptance (from two ``/metrics`` scrapes), tokens/s
both ways, whether the outputs were identical, and one final JSON line.
"""

from __future__ import annotations

import json
import os
import sys

from vllm_kimi_eagle.fixtures import corpus
from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models
from vllm_kimi_eagle.tools import vllm_server

# float32, the tiny checkpoints' own dtype (vLLM would serve them in bfloat16): "identical
# outputs" then speaks of speculation, not of bfloat16 near-ties that flip when the
# verification batch changes shape.
SERVER_ARGS = ["--max-model-len", "512", "--seed", "0", "--enforce-eager", "--dtype", "float32"]


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def serve_and_ask(target: str, prompts: list[str], max_tokens: int, log: str,
                  speculative_config: dict | None, port: int) -> dict:
    with vllm_server.running_server(target, log, speculative_config, SERVER_ARGS, port,
                                vllm_server.default_env()) as server:
        model = server.model_name()
        vllm_server.chat(server, model, prompts[0], 4)  # warm-up, not measured
        before = server.spec_counters()
        answers = []
        for i, prompt in enumerate(prompts):
            answers.append(vllm_server.chat(server, model, prompt, max_tokens))
            _say(f"  [{i + 1}/{len(prompts)}] {prompt!r} -> {answers[-1]['text'][:60]!r}...")
        counters = server.spec_counters() - before
    tokens = sum(a["completion_tokens"] for a in answers)
    seconds = sum(a["seconds"] for a in answers)
    return {
        "texts": [a["text"] for a in answers],
        "tokens_per_s": tokens / seconds,
        "counters": counters,
    }


def main(args) -> int:
    folder = ensure_tiny_models(args.models)
    target = os.path.join(folder, "target")
    draft = os.path.join(folder, args.draft)
    prompts = corpus.demo_prompts(8)
    spec_config = {"method": "eagle3", "model": draft, "num_speculative_tokens": 3}
    os.makedirs(args.out, exist_ok=True)

    _say(f"serving {target} with draft {draft} (log: {args.out}/server-spec.log)")
    spec = serve_and_ask(target, prompts, args.max_tokens, f"{args.out}/server-spec.log",
                         spec_config, args.port)
    _say(f"serving {target} without speculation (log: {args.out}/server-base.log)")
    base = serve_and_ask(target, prompts, args.max_tokens, f"{args.out}/server-base.log",
                         None, args.port)

    acceptance = spec["counters"].summary()
    identical = spec["texts"] == base["texts"]
    print(f"acceptance length      {acceptance['acceptance_length']}  "
          f"(1 + accepted/drafts, 3 speculative tokens, {acceptance['drafts']} drafts)")
    print("acceptance by position " + "  ".join(
        f"{i + 1}: {rate:.3f}" for i, rate in enumerate(acceptance["acceptance_by_position"])))
    print(f"tokens/s               {spec['tokens_per_s']:.1f} with draft, "
          f"{base['tokens_per_s']:.1f} without ({spec['tokens_per_s'] / base['tokens_per_s']:.2f}x)")
    print(f"identical outputs      {identical} ({len(prompts)} prompts x {args.max_tokens} tokens, greedy)")
    for i, (a, b) in enumerate(zip(spec["texts"], base["texts"])):
        if a != b:
            print(f"  prompt {i}: with draft {a!r}\n            without   {b!r}")
    print(json.dumps({
        "acceptance_length": acceptance["acceptance_length"],
        "acceptance_by_position": acceptance["acceptance_by_position"],
        "identical_outputs": identical,
        "tokens_per_s_spec": round(spec["tokens_per_s"], 2),
        "tokens_per_s_base": round(base["tokens_per_s"], 2),
        "prompts": len(prompts),
        "max_tokens": args.max_tokens,
        "draft": draft,
    }))
    return 0 if identical and acceptance["acceptance_length"] else 1
