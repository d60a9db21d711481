"""The CPU MLA backend's multi-token decode rows (vllm_kimi_eagle/cpu/cpu_mla_verify.py), and the
builder installed on this vLLM (real vLLM classes, no engine; served: tests/e2e/
test_cpu_mla_verify_e2e.py)."""

from __future__ import annotations

import pytest
import torch

from vllm_kimi_eagle.compat import vllm_compat
from vllm_kimi_eagle.cpu import cpu_mla_verify


def test_each_query_token_sees_the_sequence_up_to_itself():
    # Three requests: 4 tokens ending at 10 (verifying 3 drafts), 1 ending at 7, 2 ending at 5.
    rows, seq_lens = cpu_mla_verify.decode_rows(torch.tensor([0, 4, 5, 7]),
                                                torch.tensor([10, 7, 5]))
    assert rows.tolist() == [0, 0, 0, 0, 1, 2, 2]
    assert seq_lens.tolist() == [7, 8, 9, 10, 7, 4, 5]


def test_single_token_queries_are_unchanged():
    rows, seq_lens = cpu_mla_verify.decode_rows(torch.tensor([0, 1, 2, 3]),
                                                torch.tensor([9, 4, 6]))
    assert rows.tolist() == [0, 1, 2] and seq_lens.tolist() == [9, 4, 6]


def test_switch(monkeypatch):
    assert cpu_mla_verify.switched_on({}) and cpu_mla_verify.switched_on({cpu_mla_verify.SWITCH: "1"})
    assert not cpu_mla_verify.switched_on({cpu_mla_verify.SWITCH: "0"})
    assert not cpu_mla_verify.switched_on({cpu_mla_verify.SWITCH: "off"})
    assert cpu_mla_verify.switched_on({cpu_mla_verify.SWITCH: "maybe"})  # unreadable: default
    statuses = cpu_mla_verify.install_cpu_mla_verify({cpu_mla_verify.SWITCH: "0"})
    assert set(statuses.values()) <= {"off", "triton", "not-cpu"}


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
