"""One measured engine in its own process: greedy generation, then one result line.

    python -m vllm_kimi_eagle.tools.engines.engine_case '{"target": ..., ...}'

What ``gpu-check`` and ``kimi-width`` start, one engine per process. The spec:
``target``, ``speculative_config`` (or null), ``max_tokens``, and the prompts as chats
(``prompts``: user messages) or as token ids (``prompt_ids``); ``tensor_parallel``,
``enforce_eager`` (false: compiled, CUDA graphs), ``dtype`` (null: vLLM's choice),
``max_model_len`` (default 1024), ``batch_to_length`` (as many batched tokens as the
context and one sequence per prompt: a CPU MLA prefill holds heads x tokens x tokens
scores at once), ``kv_cache_memory_bytes`` (the CPU build), ``gpu_memory_utilization``
(GPUs only), ``warm_up`` (greedy tokens of an untimed batch first, so that what the first
requests compile or capture is not timed). The result (tools/engines/engine_process.py):
start-up and generation seconds, the token ids per prompt, the spec-decode counters of
the timed generation, or the error. Read back by both tools the same way: the facts of
its log (``log_facts``), whether it failed on engines started beside it, and the check
rows they report (``Check``).
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass

from vllm_kimi_eagle.tools.engines import engine_process

# vLLM's start-up memory profiling counts what other processes on the GPU allocate or free
# meanwhile; engines started side by side can trip it (an assertion, or no memory left for
# the KV cache). Such a case runs again alone.
PROFILING_RACES = ("Error in memory profiling", "No available memory for the cache blocks")


def tripped_on_neighbours(result: dict) -> bool:
    """Whether an engine failed where engines started beside it can make it fail."""
    return any(race in result.get("cause", "") for race in PROFILING_RACES)


# Facts read from an engine's log: the first match of each pattern (None: no match).
LOG_PATTERNS = {
    "v2_runner": r"Using V2 Model Runner",
    "cuda_graphs": r"Graph capturing finished[^\n]*",
    "compiled": r"Compiling a graph for[^\n]*|Directly load the compiled graph[^\n]*|"
                r"torch\.compile takes[^\n]*",
    "shortcut": r"greedy draft-token shortcut \(vLLM's use_local_argmax_reduction\) is [^\n]*",
    "plugin_class": r"vllm-kimi-eagle: serving the draft [^\n]* with the plugin's class",
}


def log_facts(log: str, started: bool = True) -> dict:
    """The facts of one engine's log; its runner is None when the engine did not start."""
    facts = {}
    for name, pattern in LOG_PATTERNS.items():
        match = re.search(pattern, log)
        facts[name] = match.group(0)[:240] if match else None
    facts["runner"] = ("v2" if facts.pop("v2_runner") else "v1") if started else None
    return facts


@dataclass(frozen=True)
class Check:
    case: str
    check: str
    ok: bool
    detail: str


def engine_kwargs(spec: dict) -> dict:
    """``LLM(...)``'s arguments for a spec."""
    length = spec.get("max_model_len", 1024)
    kwargs = dict(model=spec["target"], seed=0, disable_log_stats=False, max_model_len=length,
                  enforce_eager=spec.get("enforce_eager", False),
                  tensor_parallel_size=spec.get("tensor_parallel", 1))
    if spec.get("batch_to_length"):
        prompts = spec.get("prompt_ids") or spec.get("prompts")
        kwargs.update(max_num_batched_tokens=length, max_num_seqs=len(prompts))
    for key in ("dtype", "speculative_config", "kv_cache_memory_bytes",
                "gpu_memory_utilization"):
        if spec.get(key):
            kwargs[key] = spec[key]
    return kwargs


def _generate(llm, spec: dict, params):
    if spec.get("prompt_ids") is not None:
        from vllm.inputs import TokensPrompt

        prompts = [TokensPrompt(prompt_token_ids=ids) for ids in spec["prompt_ids"]]
        return llm.generate(prompts, params, use_tqdm=False)
    messages = [[{"role": "user", "content": p}] for p in spec["prompts"]]
    return llm.chat(messages, params, use_tqdm=False)


def run(spec: dict) -> dict:
    from vllm import LLM, SamplingParams

    from vllm_kimi_eagle.tools.engines import vllm_server
    from vllm_kimi_eagle.tools.figures import spec_metrics

    started = time.perf_counter()
    llm = LLM(**engine_kwargs(spec))
    start_s = time.perf_counter() - started
    try:
        if spec.get("warm_up"):
            _generate(llm, spec, SamplingParams(temperature=0.0, max_tokens=spec["warm_up"],
                                                ignore_eos=True))
        params = SamplingParams(temperature=0.0, max_tokens=spec["max_tokens"], ignore_eos=True)
        before = spec_metrics.from_llm_metrics(llm.get_metrics())
        started = time.perf_counter()
        outputs = _generate(llm, spec, params)
        generate_s = time.perf_counter() - started
        counters = spec_metrics.from_llm_metrics(llm.get_metrics()) - before
    finally:
        vllm_server.stop_engine(llm)
    return {"start_s": round(start_s, 1), "generate_s": round(generate_s, 3),
            "token_ids": [list(o.outputs[0].token_ids) for o in outputs],
            "accepted_per_position": [int(v) for _, v in sorted(counters.accepted_per_pos.items())],
            **counters.summary()}


if __name__ == "__main__":  # vLLM starts its workers with spawn
    engine_process.child_main(run, sys.argv[1])
