"""The tiny Kimi demo: vLLM's OpenAI server with and without the EAGLE3 MLA draft.

Builds (or reuses) the tiny models and serves the Kimi-cost target (61 layers, a decode step
that costs what Kimi's does relative to a draft step: ``fixtures/kimi_cost.py``) twice,
with the draft and without it. Both servers stay up; in each of ``--rounds`` rounds the
same greedy chat requests go to one and then the other, one request at a time (the order
alternates between rounds), while the other server is frozen. Prints acceptance length
and per-position acceptance (vLLM's counters), the distribution of per-request acceptance
(vLLM's per-request figures, where the release has them, checked to add up to the
counters), tokens/s both ways and the speedup as the median of the rounds' ratios with
their range, whether the greedy outputs were identical, and one final JSON line.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from contextlib import ExitStack

from vllm_kimi_eagle.compat.vllm_compat import installed_vllm_version
from vllm_kimi_eagle.fixtures import corpus
from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.figures import request_metrics, spec_metrics
from vllm_kimi_eagle.tools.figures.progress import say

# float32, the tiny checkpoints' own dtype (vLLM would serve them in bfloat16): "identical
# outputs" then speaks of speculation, not of bfloat16 near-ties that flip when the
# verification batch changes shape.
SERVER_ARGS = ["--max-model-len", "512", "--seed", "0", "--enforce-eager", "--dtype", "float32"]
SPEC, BASE = "with draft", "without"


def window(server: vllm_server.Server, model: str, prompts: list[str], max_tokens: int) -> dict:
    """The prompts one at a time: texts, tokens/s and the spec-decode counters."""
    before = server.spec_counters()
    started = time.perf_counter()
    answers = [vllm_server.chat(server, model, p, max_tokens) for p in prompts]
    seconds = time.perf_counter() - started
    return {"texts": [a["text"] for a in answers],
            "tokens_per_s": sum(a["completion_tokens"] for a in answers) / seconds,
            "counters": server.spec_counters() - before,
            "acceptances": [a["acceptance"] for a in answers]}


def main(args) -> int:
    folder = ensure_tiny_models(args.models)
    target = os.path.join(folder, args.target)
    draft = os.path.join(folder, args.draft)
    prompts = corpus.demo_prompts(args.prompts)
    spec_config = {"method": "eagle3", "model": draft, "num_speculative_tokens": 3}
    os.makedirs(args.out, exist_ok=True)
    servers: dict[str, tuple[vllm_server.Server, str]] = {}
    runs: dict[str, list[dict]] = {SPEC: [], BASE: []}
    with ExitStack() as stack:
        for name, speculative, log, port in ((SPEC, spec_config, "server-spec.log", args.port),
                                             (BASE, None, "server-base.log", 0)):
            say(f"starting {target} {name} speculation (log: {args.out}/{log})")
            extra = SERVER_ARGS + request_metrics.server_args(bool(speculative),
                                                              installed_vllm_version())
            server = stack.enter_context(vllm_server.running_server(
                target, os.path.join(args.out, log), speculative, extra, port,
                vllm_server.default_env()))
            model = server.model_name()
            vllm_server.chat(server, model, prompts[0], 4)  # warm-up, not measured
            server.pause()
            servers[name] = (server, model)
        for round_ in range(args.rounds):
            for name in ((SPEC, BASE) if round_ % 2 == 0 else (BASE, SPEC)):
                server, model = servers[name]
                server.resume()
                runs[name].append(window(server, model, prompts, args.max_tokens))
                server.pause()
                say(f"  round {round_ + 1}/{args.rounds} {name}: "
                    f"{runs[name][-1]['tokens_per_s']:.1f} tokens/s")
    return report(runs, prompts, args, draft, target)


def report(runs: dict, prompts: list[str], args, draft: str, target: str) -> int:
    counters = spec_metrics.SpecCounters()
    for run in runs[SPEC]:
        counters = counters + run["counters"]
    acceptance = counters.summary()
    ratios = [s["tokens_per_s"] / b["tokens_per_s"] for s, b in zip(runs[SPEC], runs[BASE])]
    speedup = statistics.median(ratios)
    spec_tps = statistics.median(r["tokens_per_s"] for r in runs[SPEC])
    base_tps = statistics.median(r["tokens_per_s"] for r in runs[BASE])
    spec_texts, base_texts = runs[SPEC][0]["texts"], runs[BASE][0]["texts"]
    identical = all(r["texts"] == base_texts for r in runs[SPEC] + runs[BASE])
    print(f"target                 {target} (Kimi's depth and decode cost)")
    print(f"acceptance length      {acceptance['acceptance_length']}  "
          f"(1 + accepted/drafts, 3 speculative tokens, {acceptance['drafts']} drafts)")
    print("acceptance by position " + "  ".join(
        f"{i + 1}: {rate:.3f}" for i, rate in enumerate(acceptance["acceptance_by_position"])))
    per_request = per_request_figures(runs[SPEC], counters)
    print(f"per request            {per_request['line']}")
    print(f"tokens/s               {spec_tps:.1f} with draft, {base_tps:.1f} without "
          f"(medians of {args.rounds} rounds, one request at a time)")
    print(f"speedup                {speedup:.2f}x, rounds {min(ratios):.2f}x-{max(ratios):.2f}x "
          "(each round's with-draft over without, measured back to back)")
    print(f"identical outputs      {identical} ({len(prompts)} prompts x {args.max_tokens} "
          "tokens, greedy, every round)")
    for i, (a, b) in enumerate(zip(spec_texts, base_texts)):
        if a != b:
            print(f"  prompt {i}: with draft {a!r}\n            without   {b!r}")
    print(json.dumps({
        "acceptance_length": acceptance["acceptance_length"],
        "acceptance_by_position": acceptance["acceptance_by_position"],
        "per_request": per_request["distribution"],
        "identical_outputs": identical,
        "tokens_per_s_spec": round(spec_tps, 2),
        "tokens_per_s_base": round(base_tps, 2),
        "speedup": round(speedup, 3),
        "speedup_rounds": [round(r, 3) for r in ratios],
        "prompts": len(prompts),
        "max_tokens": args.max_tokens,
        "target": target,
        "draft": draft,
    }))
    sys.stdout.flush()
    return 0 if identical and acceptance["acceptance_length"] else 1


def per_request_figures(runs: list[dict], counters: spec_metrics.SpecCounters) -> dict:
    """The distribution of per-request acceptance over every round, and whether the
    requests' figures add up to the counters; or the one line saying there are none."""
    found = request_metrics.reported(a for run in runs for a in run["acceptances"])
    if not found.figures:
        return {"distribution": None,
                "line": f"not reported by this vLLM ({installed_vllm_version()}; "
                        f"{request_metrics.FLAG} from {request_metrics.FROM}): aggregate only"}
    figures = list(found.figures)
    d = request_metrics.distribution(figures, k=3)
    adds_up = request_metrics.adds_up(figures, counters.summary()) if found.complete else None
    check = ({True: "adds up to the counters", False: "DOES NOT add up to the counters"}
             .get(adds_up) or found.note())
    return {"distribution": {**d, "adds_up_to_counters": adds_up, "missing": found.missing},
            "line": f"acceptance length p10 {d['p10']} / p50 {d['p50']} / p90 {d['p90']} "
                    f"over {d['requests']} requests (min {d['min']}, max {d['max']}); {check}"}
