"""The speculative hook's helpers (vllm_kimi_eagle/serving/draft_plan.py, draft_checks.py),
without vLLM building a config: the headers cache."""

from __future__ import annotations

from vllm_kimi_eagle.draft import checkpoint
from vllm_kimi_eagle.draft.draft_source import DraftHeaders
from vllm_kimi_eagle.serving import draft_checks, draft_plan

TENSORS = {"fc.weight": checkpoint.TensorInfo("org/draft/model.safetensors", (2, 6), "F32")}


def test_a_failed_header_read_is_tried_again_and_a_good_one_kept(monkeypatch):
    answers = [DraftHeaders(None, "the hub's safetensors metadata could not be read"),
               DraftHeaders(TENSORS, "hub metadata")]
    calls = []

    def read(model, revision):
        calls.append((model, revision))
        return answers[min(len(calls), len(answers)) - 1]

    monkeypatch.setattr(draft_plan, "draft_headers", read)
    monkeypatch.setattr(draft_plan, "_HEADERS", {})
    first = draft_plan._cached_headers("org/draft", None)
    assert first.tensors is None  # not kept: the next config asks again
    assert draft_plan._cached_headers("org/draft", None).tensors == TENSORS
    assert draft_plan._cached_headers("org/draft", None).tensors == TENSORS
    assert len(calls) == 2


def test_a_gated_draft_is_refused_where_vllm_never_applies_the_gate(monkeypatch):
    from packaging.version import Version

    from vllm_kimi_eagle.compat import vllm_compat
    from vllm_kimi_eagle.draft.draft_config import DraftConfigError
    from vllm_kimi_eagle.draft.draft_report import draft_report
    from vllm_kimi_eagle.fixtures import variants

    config = dict(variants.draft_config(variants.DRAFT_VARIANTS[0]), mla_use_output_gate=True)
    from vllm_kimi_eagle.draft.draft_config import parse_draft_config

    report = draft_report(parse_draft_config(config, "/d/config.json"), None,
                          target_layers=6, target_hidden=256, target_vocab=512,
                          can_capture_after_last=True, environ={})
    monkeypatch.setattr(vllm_compat, "installed_vllm_version", lambda: Version("0.26.0"))
    try:
        draft_checks.check_release(report)
    except DraftConfigError as err:
        assert "/d/config.json: mla_use_output_gate is true, but vLLM 0.26.0" in str(err)
        assert "Serve it on vLLM 0.27.0 or newer" in str(err)
    else:
        raise AssertionError("a gated draft was accepted on vLLM 0.26.0")
    monkeypatch.setattr(vllm_compat, "installed_vllm_version", lambda: Version("0.27.0"))
    draft_checks.check_release(report)
    ungated = draft_report(parse_draft_config(variants.draft_config(variants.DRAFT_VARIANTS[0])),
                           None, target_layers=6, target_hidden=256, target_vocab=512,
                           can_capture_after_last=True, environ={})
    monkeypatch.setattr(vllm_compat, "installed_vllm_version", lambda: Version("0.26.0"))
    draft_checks.check_release(ungated)
