"""The speculative hook's own helpers (vllm_kimi_eagle/speculative_hook.py), without vLLM
building a config: the headers cache."""

from __future__ import annotations

from vllm_kimi_eagle import checkpoint, speculative_hook
from vllm_kimi_eagle.draft_source import DraftHeaders

TENSORS = {"fc.weight": checkpoint.TensorInfo("org/draft/model.safetensors", (2, 6), "F32")}


def test_a_failed_header_read_is_tried_again_and_a_good_one_kept(monkeypatch):
    answers = [DraftHeaders(None, "the hub's safetensors metadata could not be read"),
               DraftHeaders(TENSORS, "hub metadata")]
    calls = []

    def read(model, revision):
        calls.append((model, revision))
        return answers[min(len(calls), len(answers)) - 1]

    monkeypatch.setattr(speculative_hook, "draft_headers", read)
    monkeypatch.setattr(speculative_hook, "_HEADERS", {})
    first = speculative_hook._cached_headers("org/draft", None)
    assert first.tensors is None  # not kept: the next config asks again
    assert speculative_hook._cached_headers("org/draft", None).tensors == TENSORS
    assert speculative_hook._cached_headers("org/draft", None).tensors == TENSORS
    assert len(calls) == 2
