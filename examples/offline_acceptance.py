"""Offline generation with an EAGLE3 MLA draft; prints acceptance from LLM.get_metrics().

    python examples/offline_acceptance.py                      # the tiny Kimi models (CPU)
    python examples/offline_acceptance.py --target moonshotai/Kimi-K2.6 \
        --draft lightseekorg/kimi-k2.6-eagle3.1-mla --tensor-parallel-size 8
"""

import argparse
import json
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target")
    parser.add_argument("--draft")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=64)
    args = parser.parse_args()
    tiny = not args.target
    if tiny:
        from vllm_kimi_eagle.fixtures.cache import ensure_tiny_models

        folder = ensure_tiny_models()
        args.target = os.path.join(folder, "target")
        args.draft = os.path.join(folder, "draft")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

    from vllm import LLM, SamplingParams

    from vllm_kimi_eagle.fixtures import corpus
    from vllm_kimi_eagle.tools.figures import spec_metrics

    llm = LLM(
        model=args.target,
        tensor_parallel_size=args.tensor_parallel_size,
        max_model_len=512,
        enforce_eager=tiny,  # the tiny models on a CPU: eager mode starts sooner than compiled
        disable_log_stats=False,  # the spec-decode counters live in the stats
        speculative_config={"method": "eagle3", "model": args.draft,
                            "num_speculative_tokens": 3},
    )
    prompts = [[{"role": "user", "content": p}] for p in corpus.demo_prompts(4)]
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    before = spec_metrics.from_llm_metrics(llm.get_metrics())
    for output in llm.chat(prompts, params, use_tqdm=False):
        print(repr(output.outputs[0].text[:80]))
    counters = spec_metrics.from_llm_metrics(llm.get_metrics()) - before
    print(json.dumps(counters.summary()))


if __name__ == "__main__":  # vLLM starts worker processes with spawn
    main()
