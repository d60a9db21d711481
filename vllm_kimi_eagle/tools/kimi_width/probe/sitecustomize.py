"""Loaded only by the processes of a ``kimi-width`` measurement (its folder is put on their
PYTHONPATH), never by a user's vLLM: times each call of vLLM's weight loader and prints one
line per model with the process's memory before and after.

vLLM logs its own "Loading weights took" once per process (``info_once``), so the draft's
loading, which comes second, is never logged; this line is what the measurement reads.
"""

import json
import sys
import time

from vllm_kimi_eagle.compat import patching
from vllm_kimi_eagle.cpu import cpu_memory

PREFIX = "VLLM_KIMI_EAGLE_LOAD "
MODULE = "vllm.model_executor.model_loader.default_loader"


def memory_kib() -> dict:
    """This process's resident memory now (anonymous and all) and its peak, in KiB, and
    what torch holds on the GPU where one is in use."""
    found = cpu_memory.status_kib("self", ("VmRSS", "VmHWM", "RssAnon"))
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        found["cuda_allocated"] = torch.cuda.memory_allocated() // 1024
        found["cuda_peak"] = torch.cuda.max_memory_allocated() // 1024
    return found


def reset_cuda_peak() -> None:
    """On a GPU the parameters exist before loading (loading copies into them): what a
    loader holds beside them shows only as the peak during loading."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.reset_peak_memory_stats()


def _wrap(module) -> None:
    loader = module.DefaultModelLoader
    original = loader.load_weights

    def load_weights(self, model, model_config):
        reset_cuda_peak()
        before, started = memory_kib(), time.perf_counter()
        try:
            return original(self, model, model_config)
        finally:
            line = {"model": model_config.model, "class": type(model).__module__ + "."
                    + type(model).__qualname__, "seconds": round(time.perf_counter() - started, 3),
                    "before_kib": before, "after_kib": memory_kib()}
            print(PREFIX + json.dumps(line), flush=True)

    loader.load_weights = load_weights


patching.when_imported(MODULE, lambda: _wrap(sys.modules[MODULE]))
