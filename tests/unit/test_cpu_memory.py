"""The CPU memory mend's line (vllm_kimi_eagle/cpu/cpu_memory.py): what it says it did."""

from __future__ import annotations

from vllm_kimi_eagle.cpu.cpu_memory import log_line


def test_the_line_names_replaced_draft_tensors_only_for_a_model_drafter():
    model = log_line(1.0, 100.0, 90.5, 12, model_drafter=True)
    assert "(1.0 MiB of packing not made)" in model and "12 objects" in model
    assert "9.5 MiB returned" in model and "draft tensors vLLM's proposer replaced" in model
    ngram = log_line(0.0, 100.0, 100.0, 3, model_drafter=False)
    assert "collected after the drafter loaded" in ngram and "draft tensors" not in ngram
    assert "memory not read (no /proc)" in log_line(0.0, None, 5.0, 0)


def test_the_line_counts_the_vocabulary_tables_the_collection_freed():
    line = log_line(1.0, 100.0, 100.0, 49, freed=(2, 4, 1.0))
    assert "49 objects in cycles; 2 of the 4 vocabulary tables loaded freed (1.0 MiB); " \
           "0.0 MiB returned" in line
