"""The two engines ``calibrate`` starts, each in a process of its own
(tools/engines/engine_process.py):

    python -m vllm_kimi_eagle.tools.calibrate.engines capture SPEC_JSON   (a session)
    python -m vllm_kimi_eagle.tools.calibrate.engines serve SPEC_JSON

``capture``: the target with vLLM's ``extract_hidden_states`` method and our connector;
then, for every request on stdin (``{"prompts": [...], "max_tokens": N}``), greedy
generation of its prompts and one file of hidden states per prompt in ``out``: the
start-up is paid once however many rounds of prompts ``calibrate`` asks for.
``serve``: the target with the draft (EAGLE3), greedy generation of the prompts; vLLM's
spec-decode counters. A prompt is ``{"messages": [...]}`` (chat, the model's template) or
``{"prompt": "..."}``.
"""

from __future__ import annotations

import os
import sys
import time

from vllm_kimi_eagle.tools.engines import engine_process

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


def capture_engine(spec: dict):
    from vllm import LLM

    from vllm_kimi_eagle.tools.calibrate import connector

    os.makedirs(spec["out"], exist_ok=True)
    return LLM(model=spec["target"], seed=0, enable_prefix_caching=False,
               speculative_config={
                   "method": "extract_hidden_states", "num_speculative_tokens": 1,
                   "draft_model_config": {"hf_config": {
                       "eagle_aux_hidden_state_layer_ids": spec["layers"]}}},
               kv_transfer_config={
                   "kv_connector": connector.CLASS_NAME,
                   "kv_connector_module_path": connector.__name__,
                   "kv_role": "kv_producer",
                   "kv_connector_extra_config": {"path": spec["out"]}},
               **spec.get("engine_args", {}))


def capture_round(llm, request: dict) -> dict:
    """Greedy generation of the request's prompts; their hidden-state files."""
    from vllm_kimi_eagle.tools.calibrate import connector

    started = time.perf_counter()
    outputs = _generate(llm, request["prompts"], request["max_tokens"])
    generate_s = time.perf_counter() - started
    paths = [(o.kv_transfer_params or {}).get(connector.PATH_KEY) for o in outputs]
    # The last requests' files are written on the engine's next steps.
    deadline = time.time() + FILES_WAIT_S
    while not all(p and os.path.exists(p) for p in paths) and time.time() < deadline:
        if os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
            llm.llm_engine.step()
        time.sleep(0.2)
    missing = [p for p in paths if not (p and os.path.exists(p))]
    if missing:
        raise RuntimeError(f"{len(missing)} hidden-state files were not written within "
                           f"{FILES_WAIT_S} s (first: {missing[0]})")
    return {"generate_s": round(generate_s, 2), "files": [
        {"path": p, "prompt_tokens": len(o.prompt_token_ids),
         "sequence": list(o.prompt_token_ids) + list(o.outputs[0].token_ids)}
        for p, o in zip(paths, outputs)]}


def capture(spec: dict) -> None:
    """Start the capture engine, report its start-up, then answer rounds from stdin."""
    from vllm_kimi_eagle.tools.engines import vllm_server

    started = time.perf_counter()
    llm = capture_engine(spec)  # a failure here becomes the session's first answer
    engine_process.emit({"start_s": round(time.perf_counter() - started, 1)})
    try:
        for line in sys.stdin:
            if line.strip():
                engine_process.emit(engine_process.answer(
                    lambda request: capture_round(llm, request), line))
    finally:
        vllm_server.stop_engine(llm)


def serve(spec: dict) -> dict:
    from vllm import LLM

    from vllm_kimi_eagle.compat.vllm_compat import installed_vllm_version
    from vllm_kimi_eagle.tools.engines import vllm_server
    from vllm_kimi_eagle.tools.figures import request_metrics, spec_metrics

    per_request = request_metrics.supported(installed_vllm_version())
    started = time.perf_counter()
    llm = LLM(model=spec["target"], seed=0, disable_log_stats=False,
              speculative_config={"method": "eagle3", "model": spec["draft"],
                                  "num_speculative_tokens": spec["k"]},
              **({"per_request_spec_decode_metrics": "summary"} if per_request else {}),
              **spec.get("engine_args", {}))
    start_s = time.perf_counter() - started
    try:
        before = spec_metrics.from_llm_metrics(llm.get_metrics())
        outputs = _generate(llm, spec["prompts"], spec["max_tokens"])
        counters = spec_metrics.from_llm_metrics(llm.get_metrics()) - before
    finally:
        vllm_server.stop_engine(llm)
    return {"start_s": round(start_s, 1),
            "token_ids": [list(o.outputs[0].token_ids) for o in outputs], **counters.summary(),
            "per_prompt": [_acceptance_length(o.outputs[0]) for o in outputs]
            if per_request else None}


def _acceptance_length(completion) -> float | None:
    """One sequence's acceptance length (vLLM's per-request figures), or None."""
    from vllm_kimi_eagle.tools.figures.request_metrics import RequestAcceptance

    figures = getattr(completion, "spec_decode_metrics", None)
    if figures is None:
        return None
    return RequestAcceptance(tuple(figures.histogram), figures.num_draft_tokens).acceptance_length


def main(argv: list[str]) -> None:
    mode, spec = argv[0], argv[1]
    if mode == "capture":
        engine_process.run_child(capture, spec)
    else:
        engine_process.child_main(serve, spec)


if __name__ == "__main__":  # vLLM starts its workers with spawn
    main(sys.argv[1:])
