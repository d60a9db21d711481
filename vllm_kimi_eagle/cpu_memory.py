"""On the CPU build: the draft tensors vLLM's proposer replaces with the target's are
returned to the system as soon as it replaces them.

A draft whose embedding or LM head is missing or equal to the target's gets the target's:
vLLM's proposer deletes the draft's own modules after loading them (``vllm_compat``,
CPU_RUNNER_LOAD). Each of their parameters holds its module (its weight loader), so the
deleted modules sit in reference cycles until Python's cyclic collector next runs, which
the CPU runner never asks for (the GPU runner does). On the CPU build each vocabulary
table is also kept beside its oneDNN packing, so a Kimi-width draft that shares both holds
four 2.2 GiB copies nobody uses: at tensor parallel 1 the worker cannot allocate its KV
cache on a 24 GiB machine (docs/measurements.md, "Kimi width").

The mend: after the CPU model runner has loaded a model with a drafter, one
``gc.collect()``, and one INFO line with what it returned. A runner without a drafter
does nothing more; a process that never imports the CPU runner (an API server, a GPU
worker) does not install it (``patching.when_imported``).
"""

from __future__ import annotations

import functools
import gc
import logging
import sys

from vllm_kimi_eagle import patching, vllm_compat

logger = logging.getLogger(f"vllm.{__name__}")  # under vLLM's log handler


def anonymous_mib() -> float | None:
    """This process's anonymous resident memory (RssAnon), MiB; None without /proc."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return None


def log_line(before: float | None, after: float | None, found: int) -> str:
    returned = f"{before - after:.1f} MiB returned" if before is not None and after is not None \
        else "memory not read (no /proc)"
    return (f"collected after the drafter loaded ({found} objects in cycles; {returned}): "
            "the draft tensors vLLM's proposer replaced with the target's")


def _collect_after(load_model):
    @functools.wraps(load_model)
    def wrapper(self, *args, **kwargs):
        result = load_model(self, *args, **kwargs)
        if hasattr(self, "drafter"):
            before = anonymous_mib()
            found = gc.collect()
            logger.info("vllm-kimi-eagle: %s", log_line(before, anonymous_mib(), found))
        return result
    return wrapper


def install_cpu_memory() -> str:
    """``"deferred"`` (wrapped when vLLM imports its CPU runner), ``"installed"`` (it was
    imported), or why not: ``"triton"``, ``"not-cpu"``."""
    skipped = vllm_compat.cpu_stand_ins_skipped()
    if skipped:
        return skipped
    imported = vllm_compat.CPU_MODEL_RUNNER in sys.modules

    def install():
        patching.wrap_method(vllm_compat.CPU_RUNNER_LOAD, vllm_compat.CPU_RUNNER_LOAD_METHOD,
                             _collect_after, "the draft tensors vLLM's proposer replaces "
                             "with the target's stay in memory until Python collects them.")

    patching.when_imported(vllm_compat.CPU_MODEL_RUNNER, install)
    return "installed" if imported else "deferred"
