"""On the CPU build, in an engine with a draft: no vocabulary table held twice for nothing.

vLLM's CPU build keeps every vocabulary table (``VocabParallelEmbedding``) beside a oneDNN
packing of it, made after loading for its use as a linear layer (``vllm_compat``,
CPU_EMBEDDING_METHOD): an input embedding, which is only ever looked up, carries a
packing nobody uses. And a draft whose embedding or LM head is missing or equal to the
target's gets the target's: vLLM's proposer deletes the draft's own after loading them,
but each of their parameters holds its module (its weight loader), so the deleted
modules sit in reference cycles until Python's cyclic collector next runs, which the CPU
runner never asks for (the GPU runner does). At Kimi's width each table is 2.2 GiB; a
worker with a 6 GB draft peaked at 22.8 GiB and was killed on a 24 GiB machine, with
either draft class (docs/measurements.md, "Kimi width").

The mend, while the CPU model runner loads a model with a drafter: input embeddings are
packed only when first used as a linear layer (a tied LM head; never, for a plain input
embedding), and one ``gc.collect()`` after the drafter has loaded, with one INFO line
saying what both returned: how many of the vocabulary tables loaded the collection freed
(held by weak references), and the memory the process gave back. A runner without a
drafter loads as vLLM does; a process that never imports the CPU runner (an API server, a
GPU worker) installs nothing (``patching.when_imported``).
"""

from __future__ import annotations

import contextvars
import dataclasses
import functools
import gc
import importlib
import logging
import sys
import weakref

from vllm_kimi_eagle.compat import patching, vllm_compat

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler
@dataclasses.dataclass
class _Load:
    """What a CPU runner with a drafter loaded: the bytes of packing not made, and every
    vocabulary table (a weak reference and its bytes), to count those the collection
    frees."""

    unpacked: list[int] = dataclasses.field(default_factory=list)
    tables: list[tuple[weakref.ref, int]] = dataclasses.field(default_factory=list)

    def alive(self) -> list[int]:
        return [size for ref, size in self.tables if ref() is not None]


# Set while a CPU runner with a drafter loads its models.
_DRAFTING_LOAD: contextvars.ContextVar[_Load | None] = contextvars.ContextVar(
    "vllm_kimi_eagle_drafting_load", default=None)
_LATER = "_vllm_kimi_eagle_pack_when_used"


def status_kib(pid: int | str = "self", fields: tuple[str, ...] = ("RssAnon", "VmRSS")
               ) -> dict[str, int]:
    """Memory fields of ``/proc/PID/status`` (this process's by default), in KiB; {} where
    there is no /proc or the process has gone. The one reader of it: the mend's line,
    ``kimi-width``'s sampler and its loading probe, ``soak``'s memory samples."""
    found = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in fields:
                    found[key] = int(value.split()[0])
    except (OSError, ValueError):
        return {}
    return found


def anonymous_mib() -> float | None:
    """This process's anonymous resident memory (RssAnon), MiB; None without /proc."""
    kib = status_kib("self", ("RssAnon",)).get("RssAnon")
    return None if kib is None else kib / 1024


def log_line(unpacked_mib: float, before: float | None, after: float | None, found: int,
             model_drafter: bool = True, freed: tuple[int, int, float] | None = None) -> str:
    """What the mend did; ``model_drafter``: the drafter is a model (an n-gram drafter has
    no tensors for vLLM's proposer to replace); ``freed``: (vocabulary tables the
    collection freed, tables loaded, MiB freed)."""
    returned = f"{before - after:.1f} MiB returned" if before is not None and after is not None \
        else "memory not read (no /proc)"
    tables = "" if freed is None else (
        f"{freed[0]} of the {freed[1]} vocabulary tables loaded freed ({freed[2]:.1f} MiB); ")
    what = (": the draft tensors vLLM's proposer replaced with the target's"
            if model_drafter else "")
    return (f"input embeddings left unpacked until used as a linear layer ({unpacked_mib:.1f} "
            f"MiB of packing not made); collected after the drafter loaded ({found} objects "
            f"in cycles; {tables}{returned}){what}")


def _collect_after(load_model):
    @functools.wraps(load_model)
    def wrapper(self, *args, **kwargs):
        if not hasattr(self, "drafter"):
            return load_model(self, *args, **kwargs)
        load = _Load()
        token = _DRAFTING_LOAD.set(load)
        try:
            result = load_model(self, *args, **kwargs)
        finally:
            _DRAFTING_LOAD.reset(token)
        before, alive = anonymous_mib(), load.alive()
        found = gc.collect()
        still = load.alive()
        freed = (len(alive) - len(still), len(load.tables), (sum(alive) - sum(still)) / 2**20)
        model_drafter = getattr(self.drafter, "model", None) is not None
        logger.info("vllm-kimi-eagle: %s", log_line(sum(load.unpacked) / 2**20, before,
                                                     anonymous_mib(), found, model_drafter,
                                                     freed))
        return result
    return wrapper


def _is_lm_head(layer) -> bool:
    module = sys.modules.get(vllm_compat.CPU_EMBEDDING_METHOD[0])
    head = getattr(module, vllm_compat.LM_HEAD_CLASS, None)
    return head is not None and isinstance(layer, head)


def _pack_when_used(process):
    @functools.wraps(process)
    def wrapper(self, layer, *args, **kwargs):
        load = _DRAFTING_LOAD.get()
        if load is None or getattr(layer.weight, "is_meta", False):
            return process(self, layer, *args, **kwargs)
        size = layer.weight.numel() * layer.weight.element_size()
        load.tables.append((weakref.ref(layer.weight), size))
        if _is_lm_head(layer):
            return process(self, layer, *args, **kwargs)
        setattr(layer, _LATER, True)  # apply() packs it, should it ever be a linear layer
        load.unpacked.append(size)
        return None
    return wrapper


def _apply_packs_first(apply):
    @functools.wraps(apply)
    def wrapper(self, layer, *args, **kwargs):
        if getattr(layer, _LATER, False) and not hasattr(layer, "cpu_linear"):
            utils = importlib.import_module(vllm_compat.CPU_GEMM_DISPATCH[0])
            getattr(utils, vllm_compat.CPU_GEMM_DISPATCH[1])(layer, remove_weight=False)
        return apply(self, layer, *args, **kwargs)
    return wrapper


def install_cpu_memory() -> str:
    """``"deferred"`` (wrapped when vLLM imports its CPU runner), ``"installed"`` (it was
    imported and every wrap is in place), ``"partial"`` (a method was missing: what its
    warning names is not mended), or why not: ``"triton"``, ``"not-cpu"``."""
    skipped = vllm_compat.cpu_stand_ins_skipped()
    if skipped:
        return skipped
    imported = vllm_compat.CPU_MODEL_RUNNER in sys.modules
    consequence = ("on the CPU build, an engine with a draft keeps the vocabulary tables it "
                   "does not use in memory.")
    done = []

    def install():
        collected = patching.wrap_method(vllm_compat.CPU_RUNNER_LOAD,
                                         vllm_compat.CPU_RUNNER_LOAD_METHOD, _collect_after,
                                         consequence)
        # Packing is deferred only where apply() can pack on first use: both or neither.
        packs = patching.wrap_method(vllm_compat.CPU_EMBEDDING_METHOD, "apply",
                                     _apply_packs_first, consequence) and \
            patching.wrap_method(vllm_compat.CPU_EMBEDDING_METHOD,
                                 "process_weights_after_loading", _pack_when_used, consequence)
        done.append(collected and packs)

    patching.when_imported(vllm_compat.CPU_MODEL_RUNNER, install)
    if not imported:
        return "deferred"
    return "installed" if all(done) else "partial"
