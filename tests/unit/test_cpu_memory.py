"""The CPU memory mend's line (vllm_kimi_eagle/cpu_memory.py): what it says it did."""

from __future__ import annotations

from vllm_kimi_eagle.cpu_memory import log_line


def test_the_line_names_replaced_draft_tensors_only_for_a_model_drafter():
    model = log_line(1.0, 100.0, 90.5, 12, model_drafter=True)
    assert "(1.0 MiB of packing not made)" in model and "12 objects" in model
    assert "9.5 MiB returned" in model and "draft tensors vLLM's proposer replaced" in model
    ngram = log_line(0.0, 100.0, 100.0, 3, model_drafter=False)
    assert "collected after the drafter loaded" in ngram and "draft tensors" not in ngram
    assert "memory not read (no /proc)" in log_line(0.0, None, 5.0, 0)
