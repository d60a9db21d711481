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
