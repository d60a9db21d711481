"""Run one real vLLM engine (CPU build) and print what tests need as one result line
(vllm_kimi_eagle/tools/engines/engine_process.py; tests/helpers.run_engine reads it).

    python tests/engine_run.py '{"target": ..., "draft": ... or null,
                                 "num_speculative_tokens": 3, "tensor_parallel_size": 1,
                                 "jobs": [{"prompts": [...], "max_tokens": 64}, ...]}'

The engine starts once and runs each job in turn (its counters read as differences): the
result holds the start's facts and, under "jobs", one result per job. A spec without
"jobs" is its own one job, its result merged into the start's.

A job: "prompts" (greedy chats) and "max_tokens"; "capture_draft_io" with "capture_path"
keeps the draft's first prefill of the job (inputs and outputs) in that file;
"both_draft_paths" runs the chats again on the draft's greedy shortcut and on vLLM's plain
path, one after the other (results under "shortcut" and "plain", each with the shortcut's
calls during it: "top_token_calls"); "mixed", "mixed_vllm_stand_in", "image_prompts",
"replicated_checksums" (below).

The start: "kv_cache_memory_bytes" sizes the KV cache (KV_CACHE_BYTES unless given; the
environment's VLLM_CPU_KVCACHE_SPACE, which would override it, is left out by
tests/helpers.run_engine). "attention_backend" / "draft_attention_backend": "CPU_MLA" gives
the target / the draft that backend (vLLM's own options). "speculative_config": {...}
serves that speculative config (e.g. ngram) instead of the EAGLE3 one that "draft" makes.

"mixed": [SamplingParams kwargs, ...] runs a second batch after the job's greedy one: the
same greedy chats with these sampled requests beside them (prompts taken in turn), the
greedy rows reported under "mixed"; "mixed_vllm_stand_in": [SamplingParams kwargs, ...]
runs such a batch once more with vLLM's own CPU expand stand-in put back (the bug the
plugin mends, vllm_kimi_eagle/cpu/cpu_sampler.py), reported under "mixed_vllm_stand_in".

A multimodal target (Kimi-K2.5 shape) also takes "trust_remote_code" and
"language_model_only" at the start, and a job "image_prompts": [{"text": ..., "image":
{"width": W, "height": H, "seed": S}}], chat messages with the image as a data: URL, run as
a second batch whose results are under "image". KIMI_EAGLE_TEST_DRAFT_MM_EMBEDDINGS=1 in the environment (an experiment, not a
plugin feature) lets the draft take the target's image embeddings at image positions
(see _give_draft_mm_embeddings).

Runs in its own process so that the plugin's registrations (or their absence, with
VLLM_PLUGINS="" or VLLM_KIMI_EAGLE_DRAFT=upstream in the environment) are exactly those
of a fresh vLLM process. The engine core runs in this process
(VLLM_ENABLE_V1_MULTIPROCESSING=0) so the draft module can be observed with hooks.
"""

from __future__ import annotations

import os
import sys
import time


# The KV cache of a test engine: room for every batch the tests send (a few dozen
# requests of at most 512 tokens, the 61-layer target's too) and no more, since the
# engine writes every byte of it at start-up.
KV_CACHE_BYTES = 192 * 2**20
# The experiment switch (engine runs with a spawned engine core import this module too).
DRAFT_MM_EMBEDDINGS_ENV = "KIMI_EAGLE_TEST_DRAFT_MM_EMBEDDINGS"


def _draft_model(llm):
    """The proposer's draft nn.Module inside the in-process engine."""
    engine_core = llm.llm_engine.engine_core.engine_core
    runner = engine_core.model_executor.driver_worker.worker.model_runner
    return runner.drafter.model


class _Capture:
    """While a job asks for it, the draft's first combine_hidden_states call and its first
    forward that starts at position 0 (the prefill of the job's first request), inputs and
    outputs. The wrappers stay on the module; they record nothing between such jobs."""

    def __init__(self, draft_model):
        self.store: dict | None = None
        original_combine = draft_model.combine_hidden_states
        original_forward = draft_model.forward

        def combine(hidden_states):
            result = original_combine(hidden_states)
            if self.store is not None and "combine_in" not in self.store:
                self.store["combine_in"] = hidden_states.detach().clone()
                self.store["combine_out"] = result.detach().clone()
            return result

        def forward(input_ids, positions, hidden_states, inputs_embeds=None, **kwargs):
            out, aux = original_forward(input_ids, positions, hidden_states, inputs_embeds,
                                        **kwargs)
            if (self.store is not None and "forward" not in self.store
                    and positions.numel() >= 4 and int(positions[0]) == 0):
                self.store["forward"] = {
                    "input_ids": input_ids.detach().clone(),
                    "positions": positions.detach().clone(),
                    "hidden_states": hidden_states.detach().clone(),
                    "out": out.detach().clone(),
                    "aux": aux.detach().clone(),
                }
            return out, aux

        draft_model.combine_hidden_states = combine
        draft_model.forward = forward

    def start(self) -> None:
        self.store = {}

    def save(self, path: str) -> str:
        import torch

        torch.save(self.store, path)
        self.store = None
        return path


def _replicated_checksums(worker) -> dict:
    """Sums of the draft weights vLLM keeps whole on every rank (run in each worker)."""
    model = worker.model_runner.drafter.model
    names = ("model.fc.weight", "model.norm.weight", "model.layers.0.hidden_norm.weight",
             "model.layers.0.input_layernorm.weight", "draft_id_to_target_id")
    params = dict(model.named_parameters())
    return {n: float(params[n].double().sum()) for n in names if n in params}


def _image_url(image: dict) -> str:
    """A deterministic RGB image (seeded noise over a gradient) as a PNG data: URL."""
    import base64
    import io

    import numpy as np
    from PIL import Image

    w, h = image["width"], image["height"]
    rng = np.random.default_rng(image.get("seed", 0))
    gradient = np.linspace(0, 255, w, dtype=np.float32)[None, :, None]
    pixels = np.clip(gradient + rng.normal(0, 40, (h, w, 3)), 0, 255).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _give_draft_mm_embeddings() -> None:
    """Experiment: the plugin's draft class declares SupportsMultiModalEmbeddings and
    merges the target's multimodal embeddings at image positions (as vLLM's
    mistral_large_3_eagle does), so the proposer passes them instead of text-only inputs."""
    from vllm.model_executor.models.utils import _merge_multimodal_embeddings

    from vllm_kimi_eagle.serving.draft_model import Eagle3DeepseekV2ForCausalLM

    def embed_input_ids(self, input_ids, multimodal_embeddings=None, *, is_multimodal=None):
        embeds = self.model.embed_input_ids(input_ids)
        if multimodal_embeddings is None or len(multimodal_embeddings) == 0:
            return embeds
        return _merge_multimodal_embeddings(inputs_embeds=embeds,
                                            multimodal_embeddings=multimodal_embeddings,
                                            is_multimodal=is_multimodal)

    Eagle3DeepseekV2ForCausalLM.supports_multimodal_embeddings = True
    Eagle3DeepseekV2ForCausalLM.embed_input_ids = embed_input_ids


def _runner_facts(worker) -> dict:
    """What the worker's model runner built (run in each worker): the target class, the
    layers it captures for the draft and whether the drafter takes image embeddings."""
    runner = worker.model_runner
    facts = {"model_class": type(runner.model).__name__, "aux_layers": _aux_layers(runner.model)}
    drafter = getattr(runner, "drafter", None)
    if drafter is not None:
        facts["drafter_takes_mm_embeddings"] = bool(drafter.supports_mm_inputs)
    return facts


def _aux_layers(model):
    """The target layers whose inputs vLLM captures for the draft (the language model's)."""
    for module in model.modules():
        layers = getattr(module, "aux_hidden_state_layers", None)
        if layers is not None and not callable(layers):
            return list(layers)
    return None


def _draft_paths(worker, shortcut: bool | None = None) -> tuple[int, bool]:
    """(run in each worker) The calls the draft's greedy shortcut (get_top_tokens) has had,
    and whether vLLM's proposer takes it (its use_local_argmax_reduction, read at every
    draft step); with ``shortcut`` given, set that to it afterwards."""
    drafter = worker.model_runner.drafter
    model = drafter.model
    if not hasattr(model, "_test_top_token_calls"):
        original = model.get_top_tokens
        model._test_top_token_calls = 0

        def counted(*args, **kwargs):
            model._test_top_token_calls += 1
            return original(*args, **kwargs)

        model.get_top_tokens = counted
    taken = bool(drafter.use_local_argmax_reduction)
    if shortcut is not None:
        drafter.use_local_argmax_reduction = shortcut
    return model._test_top_token_calls, taken


def _both_paths(llm, messages, params) -> dict:
    """The job's greedy chats on the greedy shortcut, then on vLLM's plain path (logits
    over the target vocabulary, argmax) in the same engine: each with its counters and
    the shortcut's calls during it. The engine is left as it started."""
    results = {}
    started = llm.collective_rpc(_draft_paths)
    for name, shortcut in (("shortcut", True), ("plain", False)):
        before = sum(calls for calls, _ in llm.collective_rpc(_draft_paths, args=(shortcut,)))
        results[name] = _chat(llm, messages, params)
        after = sum(calls for calls, _ in llm.collective_rpc(_draft_paths))
        results[name]["top_token_calls"] = after - before
    llm.collective_rpc(_draft_paths, args=(started[0][1],))
    results["started_on_shortcut"] = [taken for _, taken in started]
    return results


def _chat(llm, messages, params) -> dict:
    """One batch of chats between two metric scrapes: outputs and spec-decode counters."""
    from vllm_kimi_eagle.tools.figures import spec_metrics

    before = spec_metrics.from_llm_metrics(llm.get_metrics())
    started = time.time()
    outputs = llm.chat(messages, params, use_tqdm=False)
    seconds = time.time() - started
    counters = spec_metrics.from_llm_metrics(llm.get_metrics()) - before
    tokens = [list(o.outputs[0].token_ids) for o in outputs]
    return dict(
        token_ids=tokens,
        texts=[o.outputs[0].text for o in outputs],
        prompt_token_ids=[list(o.prompt_token_ids) for o in outputs],
        generate_seconds=round(seconds, 3),
        tokens_per_s=round(sum(map(len, tokens)) / seconds, 2),
        **counters.summary(),
    )


def _mixed(llm, messages, greedy, sampled_kwargs: list[dict]) -> dict:
    """The greedy chats again, with these sampled requests in the same batch: the greedy
    rows, their finish reasons, the sampled ones' and the counters."""
    from vllm import SamplingParams

    from vllm_kimi_eagle.tools.figures import spec_metrics

    sampled = [SamplingParams(**kwargs) for kwargs in sampled_kwargs]
    extra = [messages[i % len(messages)] for i in range(len(sampled))]
    before = spec_metrics.from_llm_metrics(llm.get_metrics())
    outputs = llm.chat(messages + extra, [greedy] * len(messages) + sampled, use_tqdm=False)
    counters = spec_metrics.from_llm_metrics(llm.get_metrics()) - before
    rows, others = outputs[:len(messages)], outputs[len(messages):]
    return dict(
        token_ids=[list(o.outputs[0].token_ids) for o in rows],
        finish_reasons=[o.outputs[0].finish_reason for o in rows],
        sampled=[[(len(c.token_ids), c.finish_reason) for c in o.outputs] for o in others],
        **counters.summary(),
    )


def _vllm_stand_in():
    """vLLM's own CPU expand stand-in, from a fresh copy of its module (the plugin replaced
    the function in the loaded one), and the kernel override that runs the plugin's."""
    import importlib.util

    from vllm_kimi_eagle.compat import vllm_compat

    module_name, function, _ = vllm_compat.CPU_EXPAND
    found = importlib.util.find_spec(module_name)
    fresh = importlib.util.module_from_spec(found)
    found.loader.exec_module(fresh)
    sampler_module, kernel_name = vllm_compat.CPU_EXPAND_KERNEL
    return getattr(fresh, function), getattr(sys.modules[sampler_module], kernel_name)


def _mixed_with_vllm_stand_in(llm, messages, greedy, sampled_kwargs: list[dict]) -> dict:
    original, kernel = _vllm_stand_in()
    ours = kernel._impl
    kernel._impl = kernel.func = original
    try:
        return _mixed(llm, messages, greedy, sampled_kwargs)
    finally:
        kernel._impl = kernel.func = ours


def main(spec: dict) -> dict:
    from vllm import LLM

    from vllm_kimi_eagle.tools.engines import vllm_server

    kwargs = dict(
        model=spec["target"],
        max_model_len=spec.get("max_model_len", 512),
        kv_cache_memory_bytes=spec.get("kv_cache_memory_bytes", KV_CACHE_BYTES),
        seed=0,
        enforce_eager=spec.get("enforce_eager", True),
        disable_log_stats=False,
        tensor_parallel_size=spec.get("tensor_parallel_size", 1),
    )
    if spec.get("dtype"):
        kwargs["dtype"] = spec["dtype"]
    for key in ("trust_remote_code", "language_model_only"):
        if spec.get(key):
            kwargs[key] = True
    if spec.get("attention_backend"):
        kwargs["attention_backend"] = spec["attention_backend"]
    if spec.get("draft"):
        kwargs["speculative_config"] = {
            "method": "eagle3",
            "model": spec["draft"],
            "num_speculative_tokens": spec.get("num_speculative_tokens", 3),
        }
        if spec.get("draft_attention_backend"):
            kwargs["speculative_config"]["attention_backend"] = spec["draft_attention_backend"]
    if spec.get("speculative_config"):
        kwargs["speculative_config"] = spec["speculative_config"]
    from vllm_kimi_eagle.tools.engines import engine_process

    started = time.time()
    llm = LLM(**kwargs)
    engine_process.announce_ready()
    try:
        return _serve(llm, spec, round(time.time() - started, 1))
    finally:
        vllm_server.stop_engine(llm)  # before os._exit() below


def _serve(llm, spec: dict, engine_seconds: float) -> dict:
    """The start's facts, then each job's result: under "jobs" where the spec lists its
    jobs, merged into the result where the spec is its own one job."""
    import vllm_kimi_eagle
    from vllm_kimi_eagle.compat import vllm_compat

    jobs = spec.get("jobs") or [spec]
    result = {"engine_seconds": engine_seconds}
    capture = None
    if any(job.get("capture_draft_io") for job in jobs) or (
            spec.get("draft") and spec.get("tensor_parallel_size", 1) == 1
            and os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"):
        model = _draft_model(llm)
        result["draft_class"] = f"{type(model).__module__}:{type(model).__name__}"
        if any(job.get("capture_draft_io") for job in jobs):
            capture = _Capture(model)
    model_config = llm.llm_engine.model_config
    result.update(
        plugin_file=vllm_kimi_eagle.__file__,
        supports_multimodal_inputs=vllm_compat.supports_multimodal_inputs(model_config),
        total_layers=model_config.get_total_num_hidden_layers(),
        dtype=str(model_config.dtype),
    )
    result.update(llm.collective_rpc(_runner_facts)[0])
    done = [_job(llm, job, capture) for job in jobs]
    if "jobs" in spec:
        result["jobs"] = done
    else:
        result.update(done[0])
    return result


def _job(llm, job: dict, capture: _Capture | None) -> dict:
    """One job: its greedy chats (counters as differences), then what else it asks."""
    from vllm import SamplingParams

    result: dict = {}
    params = SamplingParams(temperature=0.0, max_tokens=job.get("max_tokens", 64),
                            ignore_eos=True)
    messages = [[{"role": "user", "content": p}] for p in job.get("prompts", [])]
    if job.get("capture_draft_io"):
        capture.start()
    if messages:
        result.update(_chat(llm, messages, params))
    if job.get("capture_draft_io"):
        result["captured"] = capture.save(job["capture_path"])
    if job.get("both_draft_paths"):
        result.update(_both_paths(llm, messages, params))
    if job.get("mixed"):
        result["mixed"] = _mixed(llm, messages, params, job["mixed"])
    if job.get("mixed_vllm_stand_in"):
        result["mixed_vllm_stand_in"] = _mixed_with_vllm_stand_in(
            llm, messages, params, job["mixed_vllm_stand_in"])
    if job.get("image_prompts"):
        image_messages = [[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": _image_url(p["image"])}},
            {"type": "text", "text": p["text"]}]}] for p in job["image_prompts"]]
        try:
            result["image"] = _chat(llm, image_messages, params)
        except Exception as err:  # e.g. refused with --language-model-only: report it
            result["image_error"] = f"{type(err).__name__}: {err}"
    if job.get("replicated_checksums"):
        result["replicated_checksums"] = llm.collective_rpc(_replicated_checksums)
    return result


# Also when the engine core imports this file as __mp_main__ (spawn), where the draft loads.
if os.environ.get(DRAFT_MM_EMBEDDINGS_ENV) == "1":
    _give_draft_mm_embeddings()
# tests/divergences.py: vLLM made to diverge after the plugin decided.
if os.environ.get("VLLM_KIMI_EAGLE_PLANTED_DIVERGENCE"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests import divergences

    divergences.apply(os.environ[divergences.ENV])

if __name__ == "__main__":
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    # collective_rpc with this file's functions (pickled by name) to a separate engine core.
    os.environ.setdefault("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    from vllm_kimi_eagle.tools.engines import engine_process

    engine_process.child_main(main, sys.argv[1])
