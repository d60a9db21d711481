"""Print what a decode step of 4 tokens costs against one of 1 token, on each tiny target.

    .venv/bin/python benchmarks/forward_cost.py [--targets target,target-kimi-cost] [--repeats 3]

Speculation with k=3 verifies 4 tokens in one target forward; it pays where that forward
costs little more than a forward of 1 token, as on Kimi, whose decode step is bound by
reading its weights. For each target this serves vLLM offline (no draft, float32, eager)
and times greedy generation of 1 and of 4 sequences at once, each for a short and a long
answer, in interleaved repeats; the difference between the two lengths over the extra
tokens is the time of one decode step, without prefill and start-up. A decode step of 4
sequences reads the same weights as the verification of 4 draft tokens of one sequence.
A figure, not a test.
"""

import argparse
import json
import os
import statistics
import time

SHORT, LONG = 8, 72


def step_times(target: str, repeats: int) -> dict:
    from vllm import LLM

    from vllm_kimi_eagle.tools.engines.vllm_server import stop_engine

    llm = LLM(model=target, dtype="float32", enforce_eager=True, max_model_len=512, seed=0)
    try:
        return _measure(llm, repeats)
    finally:
        stop_engine(llm)


def _measure(llm, repeats: int) -> dict:
    from vllm import SamplingParams

    from vllm_kimi_eagle.fixtures import corpus

    prompts = [corpus.render(p) for p in corpus.demo_prompts(4)]
    llm.generate(prompts, SamplingParams(max_tokens=4), use_tqdm=False)  # warm-up
    seconds: dict[tuple[int, int], list[float]] = {}
    for _ in range(repeats):
        for batch in (1, 4):
            for tokens in (SHORT, LONG):
                params = SamplingParams(temperature=0, max_tokens=tokens, ignore_eos=True)
                started = time.perf_counter()
                llm.generate(prompts[:batch], params, use_tqdm=False)
                seconds.setdefault((batch, tokens), []).append(time.perf_counter() - started)
    median = {key: statistics.median(values) for key, values in seconds.items()}
    step = {batch: (median[(batch, LONG)] - median[(batch, SHORT)]) / (LONG - SHORT)
            for batch in (1, 4)}
    return {"step_ms_1": round(1000 * step[1], 2), "step_ms_4": round(1000 * step[4], 2),
            "ratio_4_over_1": round(step[4] / step[1], 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="target,target-kimi-cost",
                        help="folders in the tiny models folder, comma-separated")
    parser.add_argument("--models", help="tiny models folder (default: the cache)")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models

    folder = ensure_tiny_models(args.models)
    print("target              1-token step ms   4-token step ms   4 / 1")
    for name in args.targets.split(","):
        figures = step_times(os.path.join(folder, name), args.repeats)
        print(f"{name:<18}  {figures['step_ms_1']:>15}   {figures['step_ms_4']:>15}   "
              f"{figures['ratio_4_over_1']:>5}")
        print(json.dumps({"target": name, **figures}), flush=True)


if __name__ == "__main__":
    main()
