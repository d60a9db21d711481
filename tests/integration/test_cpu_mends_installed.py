"""The CPU build's mends installed on this vLLM: the sampler path this release launches,
in a process of its own (the platform's kernel registration rebinds vLLM's modules, which
nothing can undo), and the multi-token decode builder each CPU MLA backend gets (vLLM's
backend classes imported). Their pure parts: tests/unit/test_cpu_sampler.py and
tests/unit/test_cpu_mla_verify.py; served: tests/e2e/test_cpu_mla_verify_e2e.py."""

from __future__ import annotations

import os

import pytest

from tests.helpers import EXPAND_CU, reference_expand
from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.cpu import cpu_mla_verify, cpu_sampler

pytestmark = pytest.mark.usefixtures("undo_vllm_changes")


INSTALLED = """
import importlib, json
import torch
from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.cpu import cpu_sampler
statuses = cpu_sampler.install_cpu_sampler()
result = {"statuses": statuses, "again": cpu_sampler.install_cpu_sampler(),
          "skipped": vllm_compat.cpu_stand_ins_skipped()}
if not result["skipped"]:
    from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p
    empty = torch.zeros(0, 512)
    result["empty_top_k"] = list(apply_top_k_top_p(empty, torch.zeros(0, dtype=torch.int32),
                                                   None).shape)
    module = importlib.import_module(vllm_compat.CPU_EXPAND[0])
    launcher = getattr(module, vllm_compat.CPU_EXPAND[2], None)
    cu = torch.tensor(CU_VALUES, dtype=torch.int32)
    if launcher is not None:  # 0.28-0.30
        output = torch.full((5,), float("nan"))
        launcher[(3,)](output, torch.tensor(VALUES), cu, 0, 1)
    else:  # 0.31 on: the kernel the platform registers when a worker starts
        from vllm.platforms import current_platform
        from vllm.v1.sample import rejection_sampler
        current_platform.register_triton_kernel_overrides()
        output = rejection_sampler.expand_batch_to_tokens(torch.tensor(VALUES), cu, 5, 0, 1)
    result["expanded"] = output.tolist()
print(json.dumps(result))
"""


def test_install_mends_what_this_release_runs():
    """After install, what this release launches on a CPU computes right: the expand
    launcher built at import (0.28-0.30) or the kernel the platform registers when a worker
    starts (0.31 on), through rejection_sampler's own expand_batch_to_tokens; and the
    sampler's top-k/top-p entry point takes an empty batch. In a process of its own: the
    platform's kernel registration rebinds vLLM's modules, which nothing can undo."""
    from tests.helpers import run_python

    values = [0.0, 0.8, 1.3]
    # The child on this process's platform (the suite's children are told the CPU one).
    same_device = {"VLLM_TARGET_DEVICE": os.environ.get("VLLM_TARGET_DEVICE", "cuda")}
    result = run_python(INSTALLED.replace("CU_VALUES", str(EXPAND_CU))
                        .replace("VALUES", str(values)), env=same_device)
    skipped = vllm_compat.cpu_stand_ins_skipped()
    assert result["skipped"] == skipped
    if skipped:
        assert result["statuses"] == {"expand": skipped, "top_k": skipped}
        return
    assert set(result["statuses"].values()) <= set(cpu_sampler.MENDED), result["statuses"]
    assert result["again"] == {"expand": "already", "top_k": "already"}
    assert result["empty_top_k"] == [0, 512]
    assert result["expanded"] == pytest.approx(reference_expand(values, EXPAND_CU, 0, 1))



def _backend(location):
    import importlib

    module, name = location
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None


@pytest.mark.parametrize("name, location", vllm_compat.CPU_MLA_BACKENDS,
                         ids=[name for name, _ in vllm_compat.CPU_MLA_BACKENDS])
def test_install_gives_each_cpu_backend_a_multi_token_decode_builder(name, location):
    """Each CPU MLA backend this vLLM has (CPU_MLA from 0.28, AMX_MLA from 0.32) gets a
    subclass of its own builder that decodes several tokens per request."""
    import importlib

    status = cpu_mla_verify.install_cpu_mla_verify({})[name]
    if vllm_compat.cpu_stand_ins_skipped():
        assert status == vllm_compat.cpu_stand_ins_skipped()
        return
    backend = _backend(location)
    if backend is None:
        assert status == "absent"
        return
    assert status in cpu_mla_verify.MENDED
    assert cpu_mla_verify.install_cpu_mla_verify({})[name] == "already"
    builder = backend.get_builder_cls()
    common = importlib.import_module(vllm_compat.MLA_COMMON[0])
    assert issubclass(builder, getattr(common, vllm_compat.MLA_COMMON[1]))
    # Derived from the backend's own builder: AMX_MLA's keeps its per-row kernel inputs.
    assert builder.__mro__[1].__module__ in (location[0], vllm_compat.MLA_COMMON[0])
    assert builder.query_len_support == getattr(common, vllm_compat.MLA_COMMON[2]).VARLEN
    assert name in cpu_mla_verify.log_line(name) and "decode kernel" in cpu_mla_verify.log_line(name)
