"""The plugin's mends of vLLM's CPU rejection sampler (vllm_kimi_eagle/cpu/cpu_sampler.py):
the expand stand-in against the Triton kernel's semantics, the top-k path on an empty
batch, and both defects on this release's own vLLM functions (real vLLM code, no engine).
The sampler path of this release with the mends installed, in a process of its own:
tests/integration/test_cpu_mends_installed.py."""

from __future__ import annotations

import importlib.util
import inspect

import pytest
import torch

from tests.helpers import EXPAND_CU, reference_expand
from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.cpu import cpu_sampler

CU = torch.tensor(EXPAND_CU, dtype=torch.int32)
CPU_ONLY = pytest.mark.skipif(vllm_compat.cpu_stand_ins_skipped() is not None,
                              reason="this process does not run vLLM's CPU stand-ins "
                                     "(Triton, or not the CPU platform)")


@pytest.mark.parametrize("dtype, values, replace", [
    (torch.float32, [0.0, 0.8, 1.3], (0, 1)),   # temperature: greedy 0 becomes 1
    (torch.float32, [0.9, 1.0, 0.5], (0, 0)),   # top-p
    (torch.int32, [512, 20, 512], (0, 0)),      # top-k
    (torch.int64, [0, 7, 9], (0, 1)),
])
def test_expand_writes_every_token_at_the_callers_dtype(dtype, values, replace):
    output = torch.full((5,), float("nan")).to(dtype) if dtype.is_floating_point else \
        torch.full((5,), -12345, dtype=dtype)
    cpu_sampler.expand_at_caller_dtype(output, torch.tensor(values, dtype=dtype), CU, *replace)
    assert output.dtype == dtype
    expected = torch.tensor(reference_expand(values, CU.tolist(), *replace), dtype=dtype)
    assert torch.equal(output, expected)


def test_expand_leaves_the_tail_of_a_longer_buffer_alone():
    output = torch.full((7,), -1.0)
    cpu_sampler.expand_at_caller_dtype(output, torch.tensor([2.0, 3.0, 4.0]), CU, 0, 1)
    assert output.tolist() == [2.0, 2.0, 2.0, 4.0, 4.0, -1.0, -1.0]


def fresh(location: tuple[str, str]):
    """vLLM's function as its module defines it (a fresh copy of the module: the plugin
    may have replaced the function in the loaded one)."""
    module_name, name = location
    found = importlib.util.find_spec(module_name)
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return getattr(module, name)


@CPU_ONLY
def test_vllm_expand_stand_in_drops_its_output_for_float_and_int32():
    """Defect 1 on this release's own function (vLLM issue #55005). When this fails, vLLM
    fixed it: record the release in vllm_compat (CPU_SAMPLER_READ)."""
    from vllm.platforms import current_platform

    original = fresh(vllm_compat.CPU_EXPAND[:2])
    assert tuple(inspect.signature(original).parameters) == vllm_compat.CPU_EXPAND_PARAMETERS
    current_platform.import_kernels()  # vLLM's C++ ops, which the stand-in calls
    temperature = torch.full((5,), float("nan"))
    original(temperature, torch.tensor([0.0, 0.8, 1.3]), CU, 0, 1)
    assert temperature.isnan().all(), "vLLM's stand-in now writes float32 output"
    top_k = torch.full((5,), -7, dtype=torch.int32)
    original(top_k, torch.tensor([512, 20, 512], dtype=torch.int32), CU, 0, 0)
    assert (top_k == -7).all(), "vLLM's stand-in now writes int32 output"


@CPU_ONLY
def test_vllm_top_k_only_raises_on_an_empty_batch():
    """Defect 2 on this release's own function. When this fails, vLLM fixed it."""
    original = fresh(vllm_compat.CPU_TOP_K_ONLY)
    assert tuple(inspect.signature(original).parameters) == \
        vllm_compat.CPU_TOP_K_ONLY_PARAMETERS
    with pytest.raises(RuntimeError, match="numel"):
        original(torch.zeros(0, 512), torch.zeros(0, dtype=torch.int32))


def test_top_k_wrapper_keeps_vllm_on_rows_and_passes_empty_batches():
    original = fresh(vllm_compat.CPU_TOP_K_ONLY)
    wrapped = cpu_sampler.top_k_only_allowing_empty(original)
    empty = torch.zeros(0, 512)
    assert wrapped(empty, torch.zeros(0, dtype=torch.int32)) is empty
    logits = torch.arange(12, dtype=torch.float32).reshape(2, 6)
    k = torch.tensor([2, 6], dtype=torch.int32)  # row 1 keeps the whole vocabulary
    expected = original(logits.clone(), k.clone())
    assert torch.equal(wrapped(logits.clone(), k.clone()), expected)
    assert torch.isinf(expected[0, :4]).all() and torch.isfinite(expected[1]).all()


def test_log_line_names_what_was_mended():
    both = cpu_sampler.log_line({"expand": "replaced", "top_k": "already"})
    assert "#55005" in both and "top_k" in both
    assert "#55005" not in cpu_sampler.log_line({"expand": "absent", "top_k": "replaced"})
    assert cpu_sampler.log_line({"expand": "triton", "top_k": "triton"}) is None
