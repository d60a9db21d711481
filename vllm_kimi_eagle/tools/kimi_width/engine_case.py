"""One Kimi-width engine, in its own process: greedy token-id prompts, then one result line.

    python -m vllm_kimi_eagle.tools.kimi_width.engine_case '{"target": ..., ...}'

The spec: ``target``, ``speculative_config`` (or null), ``prompts`` (lists of token ids),
``max_tokens``, ``tensor_parallel``, ``enforce_eager``, ``max_model_len``,
``kv_cache_memory_bytes`` (the CPU build), ``dtype`` (default bfloat16), ``gpu_memory_utilization`` (GPUs only). The result: start-up and generation seconds, the
token ids per prompt, the spec-decode counters of the generation (tools/engine_process.py
prints it), the generation timed after a short warm-up batch.
"""

from __future__ import annotations

import sys
import time

from vllm_kimi_eagle.tools import engine_process

DTYPE = "bfloat16"


def engine_kwargs(spec: dict) -> dict:
    """``LLM(...)``'s arguments for a spec: bfloat16, a context just long enough, and a
    batch of tokens no longer than it (a CPU MLA prefill holds heads x tokens x tokens
    scores at once)."""
    length = spec.get("max_model_len", 256)
    kwargs = dict(model=spec["target"], dtype=spec.get("dtype", DTYPE), seed=0, disable_log_stats=False,
                  max_model_len=length, max_num_batched_tokens=length,
                  max_num_seqs=len(spec["prompts"]),
                  enforce_eager=spec.get("enforce_eager", False),
                  tensor_parallel_size=spec.get("tensor_parallel", 1))
    if spec.get("kv_cache_memory_bytes"):
        kwargs["kv_cache_memory_bytes"] = spec["kv_cache_memory_bytes"]
    if spec.get("gpu_memory_utilization"):
        kwargs["gpu_memory_utilization"] = spec["gpu_memory_utilization"]
    if spec.get("speculative_config"):
        kwargs["speculative_config"] = spec["speculative_config"]
    return kwargs


def run(spec: dict) -> dict:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from vllm_kimi_eagle.tools import spec_metrics, vllm_server

    started = time.perf_counter()
    llm = LLM(**engine_kwargs(spec))
    start_s = time.perf_counter() - started
    try:
        params = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"], ignore_eos=True)
        prompts = [TokensPrompt(prompt_token_ids=ids) for ids in spec["prompts"]]
        # One short batch first: what the first requests compile or capture is not timed.
        llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True),
                     use_tqdm=False)
        before = spec_metrics.from_llm_metrics(llm.get_metrics())
        started = time.perf_counter()
        outputs = llm.generate(prompts, params, use_tqdm=False)
        generate_s = time.perf_counter() - started
        counters = spec_metrics.from_llm_metrics(llm.get_metrics()) - before
    finally:
        vllm_server.stop_engine(llm)
    return {"start_s": round(start_s, 1), "generate_s": round(generate_s, 2),
            "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
            "accepted_per_position": [int(v) for _, v in sorted(counters.accepted_per_pos.items())],
            **counters.summary()}


if __name__ == "__main__":  # vLLM starts its workers with spawn
    engine_process.child_main(run, sys.argv[1])
