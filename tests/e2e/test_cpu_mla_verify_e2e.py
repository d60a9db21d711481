"""Draft tokens verified in the CPU MLA decode kernel (the plugin's default on the CPU build,
vllm_kimi_eagle/cpu/cpu_mla_verify.py) against vLLM's own prefill path: one variable, the
switch; the same greedy tokens and the same acceptance. The speed it buys is measured by
bench-e2e (docs/measurements.md), not asserted here."""

from __future__ import annotations

import pytest

from tests import engines
from tests.helpers import engine, served

pytestmark = pytest.mark.engine
PLUGIN, VERIFY_OFF, NONE = (engines.named(n) for n in (
    "draft", "draft@cpu-mla-verify-off", "none"))


def test_decode_kernel_verification_changes_no_token_and_no_acceptance(tiny):
    ours = served(engine(tiny, PLUGIN))
    vllms = served(engine(tiny, VERIFY_OFF))
    no_draft = served(engine(tiny, NONE))
    for run in (ours, vllms):
        assert run["drafts"] > 0, "no draft proposed"
    # float32: CPU_MLA serves on every CPU (the plugin moves it off AMX_MLA where AMX is).
    assert "CPU_MLA attention backend verifies draft tokens in its decode kernel" in ours["_log"]
    assert "verifies draft tokens in its decode kernel" not in vllms["_log"]
    assert "verify draft tokens through their prefill path" in vllms["_log"]
    assert ours["token_ids"] == vllms["token_ids"] == no_draft["token_ids"]
    print(f"acceptance: decode kernel {ours['acceptance_length']} "
          f"{ours['acceptance_by_position']}, vLLM's prefill path "
          f"{vllms['acceptance_length']} {vllms['acceptance_by_position']}")
    assert ours["acceptance_length"] == vllms["acceptance_length"]
    assert ours["acceptance_by_position"] == vllms["acceptance_by_position"]
