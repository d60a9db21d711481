"""The two engines ``calibrate`` starts, each in a process of its own:

    python -m vllm_kimi_eagle.tools.calibrate.engines capture SPEC_JSON
    python -m vllm_kimi_eagle.tools.calibrate.engines serve SPEC_JSON

``capture``: the target with vLLM's ``extract_hidden_states`` method and our connector;
greedy generation of every prompt; one file of hidden states per prompt in ``out``.
``serve``: the target with the draft (EAGLE3), greedy generation of the same prompts;
vLLM's spec-decode counters. Both print one line starting with ``RESULT_PREFIX``.
A prompt is ``{"messages": [...]}`` (chat, the model's template) or ``{"prompt": "..."}``.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback

RESULT_PREFIX = "CALIBRATE_RESULT "
FILES_WAIT_S = 120


def _generate(llm, prompts: list[dict], max_tokens: int):
    from vllm import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    outputs = [None] * len(prompts)
    chats = [i for i, p in enumerate(prompts) if "messages" in p]
    texts = [i for i, p in enumerate(prompts) if "messages" not in p]
    if chats:
        for i, o in zip(chats, llm.chat([prompts[i]["messages"] for i in chats], params,
                                        use_tqdm=False)):
            outputs[i] = o
    if texts:
        for i, o in zip(texts, llm.generate([prompts[i]["prompt"] for i in texts], params,
                                            use_tqdm=False)):
            outputs[i] = o
    return outputs


def capture(spec: dict) -> dict:
    from vllm import LLM

    from vllm_kimi_eagle.tools import vllm_server
    from vllm_kimi_eagle.tools.calibrate import connector

    out = spec["out"]
    os.makedirs(out, exist_ok=True)
    started = time.perf_counter()
    llm = LLM(model=spec["target"], seed=0, enable_prefix_caching=False,
              speculative_config={
                  "method": "extract_hidden_states", "num_speculative_tokens": 1,
                  "draft_model_config": {"hf_config": {
                      "eagle_aux_hidden_state_layer_ids": spec["layers"]}}},
              kv_transfer_config={
                  "kv_connector": connector.CLASS_NAME,
                  "kv_connector_module_path": connector.__name__,
                  "kv_role": "kv_producer",
                  "kv_connector_extra_config": {"path": out}},
              **spec.get("engine_args", {}))
    start_s = time.perf_counter() - started
    try:
        started = time.perf_counter()
        outputs = _generate(llm, spec["prompts"], spec["max_tokens"])
        generate_s = time.perf_counter() - started
        paths = [(o.kv_transfer_params or {}).get(connector.PATH_KEY) for o in outputs]
        # The last requests' files are written on the engine's next steps.
        deadline = time.time() + FILES_WAIT_S
        while not all(p and os.path.exists(p) for p in paths) and time.time() < deadline:
            if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
                llm.llm_engine.step()
            time.sleep(0.2)
    finally:
        vllm_server.stop_engine(llm)
    missing = [p for p in paths if not (p and os.path.exists(p))]
    if missing:
        raise RuntimeError(f"{len(missing)} hidden-state files were not written within "
                           f"{FILES_WAIT_S} s (first: {missing[0]})")
    files = [{"path": p, "prompt_tokens": len(o.prompt_token_ids),
              "sequence": list(o.prompt_token_ids) + list(o.outputs[0].token_ids)}
             for p, o in zip(paths, outputs)]
    return {"start_s": round(start_s, 1), "generate_s": round(generate_s, 2), "files": files}


def serve(spec: dict) -> dict:
    from vllm import LLM

    from vllm_kimi_eagle.tools import spec_metrics, vllm_server

    started = time.perf_counter()
    llm = LLM(model=spec["target"], seed=0, disable_log_stats=False,
              speculative_config={"method": "eagle3", "model": spec["draft"],
                                  "num_speculative_tokens": spec["k"]},
              **spec.get("engine_args", {}))
    start_s = time.perf_counter() - started
    try:
        before = spec_metrics.from_llm_metrics(llm.get_metrics())
        outputs = _generate(llm, spec["prompts"], spec["max_tokens"])
        counters = spec_metrics.from_llm_metrics(llm.get_metrics()) - before
    finally:
        vllm_server.stop_engine(llm)
    return {"start_s": round(start_s, 1),
            "token_ids": [list(o.outputs[0].token_ids) for o in outputs], **counters.summary()}


def main(argv: list[str]) -> None:
    try:
        result = {"capture": capture, "serve": serve}[argv[0]](json.loads(argv[1]))
    except Exception as err:  # reported by the parent, with the log
        traceback.print_exc()
        result = {"error": f"{type(err).__name__}: {err}"[-2000:]}
    print(RESULT_PREFIX + json.dumps(result), flush=True)
    sys.stderr.flush()
    os._exit(0)  # vLLM may leave non-daemon threads behind


if __name__ == "__main__":  # vLLM starts its workers with spawn
    main(sys.argv[1:])
