"""vLLM's CPU MLA backends verifying draft tokens in their decode kernels, as GPU backends do.

vLLM's MLA attention splits a batch into decode requests (run by the backend's decode
kernel over the latent KV cache, weight-absorbed) and prefill requests (attention over the
new tokens and their context). A backend that can decode several query tokens per request
(``query_len_support``) takes a request verifying k draft tokens as a decode of k+1
tokens; the GPU MLA backends do (FlashMLA, FlashAttention MLA, ...). The CPU backends
(``CPU_MLA``, and ``AMX_MLA`` on CPUs with AMX, ``vllm_compat.CPU_MLA_BACKENDS``) say they
can decode one token only, so every verification of draft tokens, and every first pass of
the draft, runs their prefill path in every layer (``CPU_MLA``: the context decompressed
through ``kv_b_proj`` and attended with SDPA, per step). On a deep target that makes
speculation on a CPU far costlier than on a GPU.

Both decode kernels attend one query row over the first ``seq_len`` cache entries of a
block-table row. A request's k+1 verification tokens are k+1 such rows, each with the
sequence length up to itself: the causal mask of a multi-token decode, with the kernel as
it is. The plugin gives each backend a metadata builder (a subclass of the backend's own)
that says so and writes those rows. Numerics of every verified token's attention are then
those of a plain decode of that token. Without a speculative config nothing changes: vLLM
then sends one query token per request to the decode kernel. The builder logs one line
when an engine with a draft uses it, naming the backend.
``VLLM_KIMI_EAGLE_CPU_MLA_VERIFY=0`` keeps vLLM's prefill path (to measure the difference).
"""

from __future__ import annotations

import importlib
import inspect
import logging
import os

from vllm_kimi_eagle import settings
from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.compat.patching import replace_attribute

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
_MARK = "_vllm_kimi_eagle_cpu_mla_verify"
SWITCH = settings.CPU_MLA_VERIFY.name
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


def builder_class(base, query_len_support, decode_metadata_cls, backend_name: str):
    """``base`` (the backend's MLA metadata builder) able to decode several tokens per
    request."""

    class CPUMLAMultiTokenDecodeBuilder(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if getattr(self.vllm_config, "speculative_config", None) is not None:
                _say_once(backend_name)

        def _build_decode(self, **arguments):  # vLLM passes them by name
            rows, seq_lens = decode_rows(
                arguments["query_start_loc_cpu"].to(arguments["seq_lens_device"].device),
                arguments["seq_lens_device"])
            return decode_metadata_cls(block_table=arguments["block_table_tensor"][rows],
                                       seq_lens=seq_lens, dcp_tot_seq_lens=None)

    CPUMLAMultiTokenDecodeBuilder.query_len_support = query_len_support
    CPUMLAMultiTokenDecodeBuilder.__qualname__ = f"{base.__qualname__}MultiTokenDecode"
    setattr(CPUMLAMultiTokenDecodeBuilder, _MARK, True)
    return CPUMLAMultiTokenDecodeBuilder


_said: set[str] = set()


def _say_once(backend_name: str) -> None:
    if backend_name not in _said:
        _said.add(backend_name)
        logger.info("vllm-kimi-eagle: %s", log_line(backend_name))


def switched_on(environ=os.environ) -> bool:
    return settings.value(settings.CPU_MLA_VERIFY, environ)


def install_cpu_mla_verify(environ=os.environ) -> dict[str, str]:
    """Give each CPU MLA backend the multi-token decode builder; per backend name,
    ``"replaced"``, ``"already"``, ``"triton"`` or ``"not-cpu"`` (not the CPU platform:
    the CPU backends are not used), ``"off"`` (``SWITCH=0``) or ``"absent"`` (no such
    backend in this vLLM, or not as read)."""
    names = [name for name, _ in vllm_compat.CPU_MLA_BACKENDS]
    skipped = vllm_compat.cpu_stand_ins_skipped()
    if skipped:
        return dict.fromkeys(names, skipped)
    if not switched_on(environ):
        return dict.fromkeys(names, "off")
    common_module, builder_name, support_name, decode_name = vllm_compat.MLA_COMMON
    try:
        common = importlib.import_module(common_module)
        base = getattr(common, builder_name)
        varlen = getattr(common, support_name).VARLEN
        decode_metadata = getattr(common, decode_name)
    except (ImportError, AttributeError):
        return dict.fromkeys(names, "absent")
    if not set(vllm_compat.MLA_BUILD_DECODE_ARGUMENTS) <= set(
            inspect.signature(base._build_decode).parameters):
        return dict.fromkeys(names, "absent")
    return {name: _install(location, name, base, varlen, decode_metadata)
            for name, location in vllm_compat.CPU_MLA_BACKENDS}


def _install(location, name, base, varlen, decode_metadata) -> str:
    module_name, class_name = location
    try:
        backend = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError):
        return "absent"
    builder = backend.get_builder_cls()
    if getattr(builder, _MARK, False):
        return "already"
    # Only a builder that decodes as vLLM's common one does (the rows are its input).
    if not issubclass(builder, base) or builder._build_decode is not base._build_decode:
        return "absent"
    ours = builder_class(builder, varlen, decode_metadata, name)
    replace_attribute(backend, "get_builder_cls", staticmethod(lambda: ours))
    return "replaced"


def log_line(backend_name: str) -> str:
    """What an engine with a draft logs when the builder serves ``backend_name``."""
    return (f"vLLM's {backend_name} attention backend verifies draft tokens in its decode "
            "kernel (the plugin's metadata builder), as vLLM's GPU MLA backends do; "
            f"{SWITCH}=0 keeps vLLM's prefill path.")


def off_line(environ=os.environ) -> str | None:
    """What a speculative config's log says when the switch keeps vLLM's prefill path."""
    if vllm_compat.cpu_stand_ins_skipped() or switched_on(environ):
        return None
    return (f"{SWITCH}=0: vLLM's CPU MLA backends verify draft tokens through their "
            "prefill path (every verification and first draft pass is a prefill).")
