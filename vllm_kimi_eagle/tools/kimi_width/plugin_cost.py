"""What the plugin itself costs before any weight loads, on Kimi-width drafts, in a fresh
process of its own (as a vLLM process starts):

- ``register()``, with vLLM already imported (vLLM imports it before loading plugins);
- the speculative-config hook: building vLLM's engine config for the target and each
  draft, with the hook's own share timed inside it (the draft's config.json and every
  shard's safetensors header read, checked and decided on);
- the checkpoint's headers alone (``checkpoint.read_checkpoint``: the index and each
  shard) and ``inspect``'s whole report.

    python -m vllm_kimi_eagle.tools.kimi_width.plugin_cost '{"target": ..., "drafts": [...]}'
"""

from __future__ import annotations

import sys
import time

from vllm_kimi_eagle.tools.engines import engine_process

REPEATS = 5


def _best_ms(function, repeats: int = REPEATS) -> float:
    """The fastest of ``repeats`` calls, in ms (the cost without the page cache's noise)."""
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        best = min(best, time.perf_counter() - started)
    return round(best * 1000, 2)


def run(spec: dict) -> dict:
    started = time.perf_counter()
    import vllm  # noqa: F401  (imported before plugins in every vLLM process)
    from vllm.engine.arg_utils import EngineArgs

    import_vllm_s = time.perf_counter() - started
    import vllm_kimi_eagle
    from vllm_kimi_eagle.draft import checkpoint
    from vllm_kimi_eagle.serving import speculative_hook
    from vllm_kimi_eagle.tools.inspect_draft import inspect_draft

    started = time.perf_counter()
    vllm_kimi_eagle.register()
    register_ms = round((time.perf_counter() - started) * 1000, 2)
    hook_s: list[float] = []
    original = speculative_hook.on_speculative_config

    def timed(spec_config, asked):
        began = time.perf_counter()
        try:
            return original(spec_config, asked)
        finally:
            hook_s.append(time.perf_counter() - began)

    speculative_hook.on_speculative_config = timed
    drafts = {}
    try:
        for draft in spec["drafts"]:
            hook_s.clear()
            began = time.perf_counter()
            EngineArgs(model=spec["target"], dtype="bfloat16", max_model_len=256,
                       speculative_config={"method": "eagle3", "model": draft,
                                           "num_speculative_tokens": 3},
                       ).create_engine_config()
            drafts[draft] = {
                "engine_config_ms": round((time.perf_counter() - began) * 1000, 1),
                "hook_ms": round(sum(hook_s) * 1000, 2), "hook_calls": len(hook_s),
                "headers_ms": _best_ms(lambda d=draft: checkpoint.read_checkpoint(d)),
                "files": len(checkpoint.checkpoint_files(draft)),
                "inspect_ms": _best_ms(lambda d=draft: inspect_draft(d, spec["target"])),
            }
    finally:
        speculative_hook.on_speculative_config = original
    return {"import_vllm_s": round(import_vllm_s, 2), "register_ms": register_ms,
            "drafts": drafts}


if __name__ == "__main__":
    engine_process.child_main(run, sys.argv[1])
