"""Print the speed figures of speculation, client side and server side, per window.

    .venv/bin/python benchmarks/speed_figures.py [--rounds 2] [--max-tokens 48]

Serves the tiny target without, then with, its draft; after one warm-up request sends
the same 8 GPQA-format prompts at concurrency 1 and 4, ``--rounds`` times, and prints
for each window: output tokens/s measured by the client, the server's time per output
token (decode time / tokens after each request's first), the decode steps summed over
requests (``vllm:inter_token_latency_seconds`` is observed once per request and engine
step, not per token) with the time per step, and acceptance. A figure, not a test: what ``vllm-kimi-eagle eval``
reports as speedup_generation and speedup_time_per_output_token, with the spread
between rounds showing how noisy the machine is.
"""

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models
from vllm_kimi_eagle.tools.engines import vllm_server
from vllm_kimi_eagle.tools.evaluation.tasks import tiny_data
from vllm_kimi_eagle.tools.figures import spec_metrics

STEPS = "vllm:inter_token_latency_seconds"


def prompts() -> list[str]:
    with open(tiny_data()) as f:
        rows = [json.loads(line) for line in f][:8]
    return [f"What is the correct answer to this question:{r['Question']}\nChoices:\n"
            f"(A) {r['Correct Answer']}\n(B) {r['Incorrect Answer 1']}\n"
            f"(C) {r['Incorrect Answer 2']}\n(D) {r['Incorrect Answer 3']}\n"
            "Let's think step by step: " for r in rows]


def window(server, model, texts, concurrency, max_tokens) -> dict:
    before = server.scrape()
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(lambda p: vllm_server.chat(server, model, p, max_tokens), texts))
    seconds = time.perf_counter() - started
    w = server.scrape() - before
    tokens = w.total(spec_metrics.GENERATION_TOKENS)
    steps = w.total(STEPS + "_count")
    return {
        "tokens_per_s": round(tokens / seconds, 1),
        "tpot_ms": spec_metrics.time_per_output_token_ms(w),
        "steps": int(steps),
        "ms_per_step": round(1000 * w.total(STEPS + "_sum") / steps, 2) if steps else None,
        "acceptance": spec_metrics.spec_counters(w).summary()["acceptance_length"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--out", default="out/speed-figures", help="server logs")
    args = parser.parse_args()
    folder = ensure_tiny_models()
    texts = prompts()
    spec = {"method": "eagle3", "model": os.path.join(folder, "draft"),
            "num_speculative_tokens": 3}
    results = {}
    for label, config in (("without draft", None), ("with draft", spec)):
        log = os.path.join(args.out, f"server-{label.replace(' ', '-')}.log")
        with vllm_server.running_server(os.path.join(folder, "target"), log, config,
                                    ["--seed", "0", "--dtype=float32", "--enforce-eager"],
                                    env=vllm_server.default_env()) as server:
            model = server.model_name()
            vllm_server.chat(server, model, texts[0], args.max_tokens)  # warm-up
            for round_ in range(args.rounds):
                for concurrency in (1, 4):
                    row = window(server, model, texts, concurrency, args.max_tokens)
                    results.setdefault(concurrency, {}).setdefault(label, []).append(row)
                    print(f"{label:>13}  round {round_ + 1}  concurrency {concurrency}: {row}",
                          flush=True)
    for concurrency, by_label in results.items():
        for base, spec_row in zip(by_label["without draft"], by_label["with draft"]):
            print(f"concurrency {concurrency}: speedup by tokens/s "
                  f"{spec_row['tokens_per_s'] / base['tokens_per_s']:.3f}, by time per "
                  f"output token {base['tpot_ms'] / spec_row['tpot_ms']:.3f}")


if __name__ == "__main__":
    main()
