"""vLLM's CPU MLA backend verifying draft tokens in its decode kernel, as GPU backends do.

vLLM's MLA attention splits a batch into decode requests (run by the backend's decode
kernel over the latent KV cache, weight-absorbed) and prefill requests (non-absorbed
attention over the decompressed context). A backend that can decode several query tokens
per request (``query_len_support``) takes a request verifying k draft tokens as a decode of
k+1 tokens; the GPU MLA backends do (FlashMLA, FlashAttention MLA, ...). The CPU backend
(``cpu_mla.py``) says it can decode one token only, so every verification of draft tokens,
and every first pass of the draft, runs the prefill path in every layer: the context
decompressed through ``kv_b_proj`` and attended with SDPA, per step. On a deep target that
makes speculation on a CPU far costlier than on a GPU.

Its decode kernel (``mla_decode_kvcache_cpu``) attends one query row over the first
``seq_len`` cache entries of a block-table row. A request's k+1 verification tokens are k+1
such rows, each with the sequence length up to itself: the causal mask of a multi-token
decode, with the kernel as it is. The plugin gives the CPU backend a metadata builder that
says so and writes those rows (``vllm_compat.CPU_MLA_BACKEND``). Numerics of every
verified token are then those of a plain decode of that token. Without a speculative
config nothing changes: vLLM then sends one query token per request to the decode kernel.
``VLLM_KIMI_EAGLE_CPU_MLA_VERIFY=0`` keeps vLLM's prefill path (to measure the difference).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os

from vllm_kimi_eagle import vllm_compat

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
_MARK = "_vllm_kimi_eagle_cpu_mla_verify"
SWITCH = "VLLM_KIMI_EAGLE_CPU_MLA_VERIFY"
MENDED = ("replaced", "already")


def decode_rows(query_start_loc, seq_lens):
    """(request of each decode row, its sequence length) for requests whose query tokens
    are ``query_start_loc`` (cumulative, from 0) and whose sequences end at ``seq_lens``:
    token j of an n-token query sees the sequence up to itself, ``seq_len - (n - 1 - j)``."""
    import torch

    starts, ends = query_start_loc[:-1], query_start_loc[1:]
    counts = (ends - starts).to(torch.long)
    rows = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)
    token = torch.arange(int(counts.sum()), device=counts.device)
    behind = ends.to(torch.long)[rows] - 1 - token
    return rows, seq_lens.to(torch.long)[rows] - behind


def builder_class(base, query_len_support, decode_metadata_cls):
    """``base`` (vLLM's MLA metadata builder) able to decode several tokens per request."""

    class CPUMLAMultiTokenDecodeBuilder(base):
        def _build_decode(self, **arguments):  # vLLM passes them by name
            rows, seq_lens = decode_rows(
                arguments["query_start_loc_cpu"].to(arguments["seq_lens_device"].device),
                arguments["seq_lens_device"])
            return decode_metadata_cls(block_table=arguments["block_table_tensor"][rows],
                                       seq_lens=seq_lens, dcp_tot_seq_lens=None)

    CPUMLAMultiTokenDecodeBuilder.query_len_support = query_len_support
    setattr(CPUMLAMultiTokenDecodeBuilder, _MARK, True)
    return CPUMLAMultiTokenDecodeBuilder


def switched_on(environ=os.environ) -> bool:
    value = environ.get(SWITCH, "1").strip()
    if value not in ("0", "1", ""):
        raise ValueError(f"environment variable {SWITCH}={value!r} is not 0 or 1; unset it "
                         "(draft tokens verified in the CPU MLA decode kernel) or set 0 "
                         "(vLLM's prefill path).")
    return value != "0"


def install_cpu_mla_verify(environ=os.environ) -> str:
    """Give vLLM's CPU MLA backend the multi-token decode builder: ``"replaced"``,
    ``"already"``, ``"triton"`` (a GPU build: the CPU backend is not used), ``"off"``
    (``SWITCH=0``) or ``"absent"`` (no CPU MLA backend in this vLLM, or not as read)."""
    if vllm_compat.has_triton():
        return "triton"
    if not switched_on(environ):
        return "off"
    backend_module, backend_name = vllm_compat.CPU_MLA_BACKEND
    common_module, builder_name, support_name, decode_name = vllm_compat.MLA_COMMON
    try:
        backend = getattr(importlib.import_module(backend_module), backend_name)
        common = importlib.import_module(common_module)
        base = getattr(common, builder_name)
        varlen = getattr(common, support_name).VARLEN
        decode_metadata = getattr(common, decode_name)
    except (ImportError, AttributeError):
        return "absent"
    if getattr(backend.get_builder_cls(), _MARK, False):
        return "already"
    if backend.get_builder_cls() is not base:  # vLLM gave it a builder of its own
        return "absent"
    if not set(vllm_compat.MLA_BUILD_DECODE_ARGUMENTS) <= set(
            inspect.signature(base._build_decode).parameters):
        return "absent"
    builder = builder_class(base, varlen, decode_metadata)
    backend.get_builder_cls = staticmethod(lambda: builder)
    return "replaced"


def log_line(status: str) -> str | None:
    """What a speculative config's log says about the builder (None: nothing to say)."""
    if status in MENDED:
        return ("vLLM's CPU MLA backend verifies draft tokens in its decode kernel (the "
                "plugin's metadata builder), as vLLM's GPU MLA backends do; "
                f"{SWITCH}=0 keeps vLLM's prefill path.")
    if status == "off":
        return (f"{SWITCH}=0: vLLM's CPU MLA backend verifies draft tokens through its "
                "prefill path (the context decompressed in every layer, every step).")
    return None
