"""The plugin's expand stand-in (vllm_kimi_eagle/cpu_expand.py) against the Triton kernel's
semantics, vLLM's own stand-in's defect, and the sampler path of this vLLM release with the
plugin's in place (real vLLM code, no engine)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect

import pytest
import torch

from vllm_kimi_eagle import cpu_expand, vllm_compat

# cu_num_tokens [3, 3, 5]: the second request has no draft tokens.
CU = torch.tensor([3, 3, 5], dtype=torch.int32)


def reference_expand(values: list, cu: list, replace_from, replace_to) -> list:
    """The Triton expand_kernel, one request at a time."""
    out, start = [], 0
    for value, end in zip(values, cu):
        out += [replace_to if value == replace_from else value] * (end - start)
        start = end
    return out


@pytest.mark.parametrize("dtype, values, replace", [
    (torch.float32, [0.0, 0.8, 1.3], (0, 1)),   # temperature: greedy 0 becomes 1
    (torch.float32, [0.9, 1.0, 0.5], (0, 0)),   # top-p
    (torch.int32, [512, 20, 512], (0, 0)),      # top-k
    (torch.int64, [0, 7, 9], (0, 1)),
])
def test_expand_writes_every_token_at_the_callers_dtype(dtype, values, replace):
    output = torch.full((5,), float("nan")).to(dtype) if dtype.is_floating_point else \
        torch.full((5,), -12345, dtype=dtype)
    cpu_expand.expand_at_caller_dtype(output, torch.tensor(values, dtype=dtype), CU, *replace)
    assert output.dtype == dtype
    expected = torch.tensor(reference_expand(values, CU.tolist(), *replace), dtype=dtype)
    assert torch.equal(output, expected)


def test_expand_leaves_the_tail_of_a_longer_buffer_alone():
    output = torch.full((7,), -1.0)
    cpu_expand.expand_at_caller_dtype(output, torch.tensor([2.0, 3.0, 4.0]), CU, 0, 1)
    assert output.tolist() == [2.0, 2.0, 2.0, 4.0, 4.0, -1.0, -1.0]


def vllm_own_stand_in():
    """vLLM's stand-in as its module defines it (a fresh copy: the plugin may have replaced
    the function in the loaded module), or None where this release has none."""
    module_name, function, _ = vllm_compat.CPU_EXPAND
    found = importlib.util.find_spec(module_name)
    if found is None:
        return None
    fresh = importlib.util.module_from_spec(found)
    found.loader.exec_module(fresh)
    return getattr(fresh, function, None)


def test_vllm_own_stand_in_drops_its_output_for_float_and_int32():
    """The defect the plugin mends (vLLM issue #55005), on this release's own function.
    When this fails, vLLM fixed it: record the release in vllm_compat.CPU_EXPAND_READ."""
    from vllm.platforms import current_platform

    original = vllm_own_stand_in()
    if original is None or vllm_compat.has_triton():
        pytest.skip("this vLLM runs the Triton kernel, not a CPU stand-in")
    assert tuple(inspect.signature(original).parameters) == \
        vllm_compat.CPU_EXPAND_PARAMETERS
    current_platform.import_kernels()  # vLLM's C++ ops, which the stand-in calls
    temperature = torch.full((5,), float("nan"))
    original(temperature, torch.tensor([0.0, 0.8, 1.3]), CU, 0, 1)
    assert temperature.isnan().all(), "vLLM's stand-in now writes float32 output"
    top_k = torch.full((5,), -7, dtype=torch.int32)
    original(top_k, torch.tensor([512, 20, 512], dtype=torch.int32), CU, 0, 0)
    assert (top_k == -7).all(), "vLLM's stand-in now writes int32 output"


def test_install_puts_ours_where_this_release_runs_it():
    """After install, whatever this release launches as the sampler's expand kernel on a
    CPU computes right: the launcher built at import (0.28-0.30) or the kernel override the
    platform registers when a worker starts (0.31 on), through rejection_sampler's own
    expand_batch_to_tokens."""
    if vllm_compat.has_triton():
        assert cpu_expand.install_cpu_expand() == "triton"
        return
    assert cpu_expand.install_cpu_expand() in ("replaced", "already")
    assert cpu_expand.install_cpu_expand() == "already"
    module = importlib.import_module(vllm_compat.CPU_EXPAND[0])
    launcher = getattr(module, vllm_compat.CPU_EXPAND[2], None)
    values, expected = [0.0, 0.8, 1.3], reference_expand([0.0, 0.8, 1.3], CU.tolist(), 0, 1)
    if launcher is not None:  # 0.28-0.30
        output = torch.full((5,), float("nan"))
        launcher[(3,)](output, torch.tensor(values), CU, 0, 1)
        assert output.tolist() == pytest.approx(expected)
        return
    from vllm.platforms import current_platform
    from vllm.v1.sample import rejection_sampler

    current_platform.register_triton_kernel_overrides()
    expanded = rejection_sampler.expand_batch_to_tokens(torch.tensor(values), CU, 5, 0, 1)
    assert expanded.tolist() == pytest.approx(expected)


def test_log_line_names_the_issue_only_when_replaced():
    assert "#55005" in cpu_expand.log_line("replaced")
    assert "#55005" in cpu_expand.log_line("already")
    assert cpu_expand.log_line("triton") is None
    assert cpu_expand.log_line("absent") is None
