"""One ``gpu-check`` engine, in its own process: greedy chats, then one result line.

    python -m vllm_kimi_eagle.tools.gpu_check.engine_case '{"target": ..., ...}'

The spec: ``target``, ``speculative_config`` (or null), ``prompts``, ``max_tokens``,
``tensor_parallel``, ``gpu_memory_utilization``, ``max_model_len``, ``enforce_eager``
(false: compiled, CUDA graphs), ``dtype`` (null: vLLM's choice). Its result line
(tools/engine_process.py): start-up and generation seconds, token ids per prompt and the
spec-decode counters of the generation, or the error.
"""

from __future__ import annotations

import sys
import time

from vllm_kimi_eagle.tools import engine_process


def run(spec: dict) -> dict:
    from vllm import LLM, SamplingParams

    from vllm_kimi_eagle.tools import spec_metrics, vllm_server

    kwargs = dict(model=spec["target"], seed=0, disable_log_stats=False,
                  max_model_len=spec.get("max_model_len", 1024),
                  enforce_eager=spec.get("enforce_eager", False),
                  tensor_parallel_size=spec.get("tensor_parallel", 1))
    if spec.get("gpu_memory_utilization"):
        kwargs["gpu_memory_utilization"] = spec["gpu_memory_utilization"]
    if spec.get("dtype"):
        kwargs["dtype"] = spec["dtype"]
    if spec.get("speculative_config"):
        kwargs["speculative_config"] = spec["speculative_config"]
    started = time.perf_counter()
    llm = LLM(**kwargs)
    start_s = time.perf_counter() - started
    try:
        params = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"], ignore_eos=True)
        messages = [[{"role": "user", "content": p}] for p in spec["prompts"]]
        before = spec_metrics.from_llm_metrics(llm.get_metrics())
        started = time.perf_counter()
        outputs = llm.chat(messages, params, use_tqdm=False)
        generate_s = time.perf_counter() - started
        counters = spec_metrics.from_llm_metrics(llm.get_metrics()) - before
    finally:
        vllm_server.stop_engine(llm)
    return {"start_s": round(start_s, 1), "generate_s": round(generate_s, 3),
            "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
            **counters.summary()}


if __name__ == "__main__":  # vLLM starts its workers with spawn
    engine_process.child_main(run, sys.argv[1])
