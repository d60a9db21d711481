"""A draft class built and loaded as vLLM's worker builds it, without an engine: vLLM's own
config path (``create_engine_config``, the plugin's hook included), the class vLLM's
registry resolves for the draft, built under that config on one gloo rank, and its
``load_weights`` fed the checkpoint's tensors. A few seconds a draft, no KV cache, no
forward pass: what a class builds and loads from each draft, side by side.

Run in a child process (``probe`` prints one JSON object): the plugin's switches are
read when vLLM loads it, so each route is a process of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys


@contextlib.contextmanager
def one_rank():
    """vLLM's distributed state for one rank (gloo), as the layers need it."""
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import (
        destroy_distributed_environment,
        destroy_model_parallel,
        init_distributed_environment,
        initialize_model_parallel,
    )

    from vllm_kimi_eagle.tools.engines.vllm_server import free_port

    with set_current_vllm_config(VllmConfig()):
        init_distributed_environment(
            world_size=1, rank=0, local_rank=0, backend="gloo",
            distributed_init_method=f"tcp://127.0.0.1:{free_port()}")
        initialize_model_parallel(1, 1)
        try:
            yield
        finally:
            destroy_model_parallel()
            destroy_distributed_environment()


def checkpoint_tensors(folder: str) -> dict:
    from safetensors.torch import load_file

    from vllm_kimi_eagle.draft import checkpoint

    tensors = {}
    for path in checkpoint.checkpoint_files(folder):
        tensors.update(load_file(path))
    return tensors


def build(config):
    """The draft class vLLM resolves for the draft, built under ``config``."""
    from vllm.config import set_current_vllm_config
    from vllm.model_executor.model_loader.utils import get_model_architecture

    draft = config.speculative_config.draft_model_config
    cls, _ = get_model_architecture(draft)
    with set_current_vllm_config(config):
        return cls(vllm_config=config, prefix="")


def unloaded(model, tensors: dict) -> list[str]:
    """The checkpoint tensors that map one to one onto a parameter of the built model and
    whose values it does not hold after loading (a weight left at its initial value)."""
    import torch

    from vllm_kimi_eagle.draft.draft_spec import canonical_name

    params = dict(model.named_parameters())
    found = []
    for name, tensor in tensors.items():
        canonical = canonical_name(name)
        candidates = {"d2t": ["draft_id_to_target_id"]}.get(
            canonical, [canonical, f"model.{canonical}",
                        f"model.{canonical}".replace(".self_attn.g_proj.",
                                                     ".self_attn.mla_attn.g_proj.")])
        param = next((params[c] for c in candidates if c in params
                      and tuple(params[c].shape) == tuple(tensor.shape)), None)
        if param is None:
            continue
        if not torch.equal(param.detach().cpu(), tensor.to(param.dtype)):
            found.append(name)
    return sorted(found)


def self_check_of(config, model) -> list[str] | None:
    """The worker's self-check on the built draft, against a target holding the capture
    ids the plan names (what the runner sets on the real one); None without a plan."""
    import torch

    from vllm_kimi_eagle.draft.served_draft import attached
    from vllm_kimi_eagle.serving import self_check

    plan = attached(config.speculative_config.draft_model_config.hf_config)
    if plan is None:
        return None
    target = torch.nn.Module()
    target.aux_hidden_state_layers = tuple(plan.capture_ids or ())
    return self_check.check(plan, config.speculative_config, target, model).differences


def probe(target: str, cases: dict, patches: tuple[str, ...] = ()) -> dict:
    """For each case (name -> draft folder): how vLLM builds its config, the class it
    builds, what that class loads from the checkpoint and what it is, as built.
    ``patches``: "quantization" lets a quantized draft through the hook's platform check
    (this probe loads weights, it serves nothing)."""
    from vllm.engine.arg_utils import EngineArgs

    from vllm_kimi_eagle.serving import enacted

    if "quantization" in patches:
        from vllm_kimi_eagle.serving import speculative_hook

        speculative_hook.check_quantization = lambda draft, report: None
    results = {}
    with one_rank():
        for name, folder in cases.items():
            found = results[name] = {}
            try:
                config = EngineArgs(model=target, max_model_len=256, dtype="float32",
                                    speculative_config={
                    "method": "eagle3", "model": folder, "num_speculative_tokens": 3},
                ).create_engine_config()
            except Exception as err:
                found["config_error"] = f"{type(err).__name__}: {err}"
                continue
            draft = config.speculative_config.draft_model_config
            found["architecture"] = list(draft.hf_config.architectures)
            found["capture_ids"] = getattr(draft.hf_config,
                                           "eagle_aux_hidden_state_layer_ids", None)
            try:
                model = build(config)
                tensors = checkpoint_tensors(folder)
                model.load_weights(iter(tensors.items()))
            except Exception as err:
                found["load_error"] = f"{type(err).__name__}: {err}"
                continue
            found["built"] = enacted.draft_as_built(model).as_dict()
            found["layers"] = len(model.model.layers)
            found["self_check"] = self_check_of(config, model)
            found["unloaded"] = unloaded(model, tensors)
            found["d2t_values"] = (None if model.draft_id_to_target_id is None
                                   else model.draft_id_to_target_id.tolist()[:8])
    return results


if __name__ == "__main__":
    request = json.loads(sys.argv[1])
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    print(json.dumps(probe(request["target"], request["cases"],
                           tuple(request.get("patches", ())))))
