"""Run one real vLLM engine (CPU build) and print what tests need as one JSON line.

    python tests/engine_run.py '{"target": ..., "draft": ... or null, "prompts": [...],
                                 "max_tokens": 64, "num_speculative_tokens": 3,
                                 "capture_draft_io": false, "tensor_parallel_size": 1}'

Runs in its own process so that the plugin's registrations (or their absence, with
VLLM_PLUGINS="" or VLLM_KIMI_EAGLE_DRAFT=upstream in the environment) are exactly those
of a fresh vLLM process. The engine core runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0) so the draft module can be observed with hooks.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def _draft_model(llm):
    """The proposer's draft nn.Module inside the in-process engine."""
    engine_core = llm.llm_engine.engine_core.engine_core
    runner = engine_core.model_executor.driver_worker.worker.model_runner
    return runner.drafter.model


def _capture_first_prefill(draft_model, store: dict):
    """Record the draft's first combine_hidden_states call and its first forward that
    starts at position 0 (the prefill of the first request), inputs and outputs."""
    original_combine = draft_model.combine_hidden_states
    original_forward = draft_model.forward

    def combine(hidden_states):
        result = original_combine(hidden_states)
        if "combine_in" not in store:
            store["combine_in"] = hidden_states.detach().clone()
            store["combine_out"] = result.detach().clone()
        return result

    def forward(input_ids, positions, hidden_states, inputs_embeds=None, **kwargs):
        out, aux = original_forward(input_ids, positions, hidden_states, inputs_embeds, **kwargs)
        if "forward" not in store and positions.numel() >= 4 and int(positions[0]) == 0:
            store["forward"] = {
                "input_ids": input_ids.detach().clone(),
                "positions": positions.detach().clone(),
                "hidden_states": hidden_states.detach().clone(),
                "out": out.detach().clone(),
                "aux": aux.detach().clone(),
            }
        return out, aux

    draft_model.combine_hidden_states = combine
    draft_model.forward = forward


def _replicated_checksums(worker) -> dict:
    """Sums of the draft weights vLLM keeps whole on every rank (run in each worker)."""
    model = worker.model_runner.drafter.model
    names = ("model.fc.weight", "model.norm.weight", "model.layers.0.hidden_norm.weight",
             "model.layers.0.input_layernorm.weight", "draft_id_to_target_id")
    params = dict(model.named_parameters())
    return {n: float(params[n].double().sum()) for n in names if n in params}


def main(spec: dict) -> dict:
    from vllm import LLM, SamplingParams

    from vllm_kimi_eagle import spec_metrics

    kwargs = dict(
        model=spec["target"],
        max_model_len=spec.get("max_model_len", 512),
        seed=0,
        enforce_eager=spec.get("enforce_eager", True),
        disable_log_stats=False,
        tensor_parallel_size=spec.get("tensor_parallel_size", 1),
    )
    if spec.get("dtype"):
        kwargs["dtype"] = spec["dtype"]
    if spec.get("draft"):
        kwargs["speculative_config"] = {
            "method": "eagle3",
            "model": spec["draft"],
            "num_speculative_tokens": spec.get("num_speculative_tokens", 3),
        }
    started = time.time()
    llm = LLM(**kwargs)
    result = {"engine_seconds": round(time.time() - started, 1)}
    captured: dict = {}
    if spec.get("capture_draft_io"):
        model = _draft_model(llm)
        result["draft_class"] = f"{type(model).__module__}:{type(model).__name__}"
        _capture_first_prefill(model, captured)
    elif spec.get("draft") and spec.get("tensor_parallel_size", 1) == 1:
        model = _draft_model(llm)
        result["draft_class"] = f"{type(model).__module__}:{type(model).__name__}"
    params = SamplingParams(temperature=0.0, max_tokens=spec.get("max_tokens", 64), ignore_eos=True)
    messages = [[{"role": "user", "content": p}] for p in spec["prompts"]]
    before = spec_metrics.from_llm_metrics(llm.get_metrics())
    started = time.time()
    outputs = llm.chat(messages, params, use_tqdm=False)
    seconds = time.time() - started
    counters = spec_metrics.from_llm_metrics(llm.get_metrics()) - before
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    result.update(
        token_ids=tokens,
        texts=[o.outputs[0].text for o in outputs],
        prompt_token_ids=[list(o.prompt_token_ids) for o in outputs],
        generate_seconds=round(seconds, 3),
        tokens_per_s=round(sum(map(len, tokens)) / seconds, 2),
        dtype=str(llm.llm_engine.model_config.dtype),
        **counters.summary(),
    )
    if spec.get("replicated_checksums"):
        result["replicated_checksums"] = llm.collective_rpc(_replicated_checksums)
    if captured:
        import torch

        path = spec["capture_path"]
        torch.save(captured, path)
        result["captured"] = path
    return result


if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    spec = json.loads(sys.argv[1])
    try:
        result = main(spec)
    except Exception as err:  # report the error as data: tests assert on messages
        traceback.print_exc()
        result = {"error": f"{type(err).__name__}: {err}"}
    print(json.dumps(result), flush=True)
    # vLLM may leave non-daemon threads behind; the JSON line is all we need.
    os._exit(0)
