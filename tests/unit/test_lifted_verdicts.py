"""What ``kimi-width`` asserts of the lifted models' engines (tools/kimi_width/
lifted_verdicts.py), on results shaped as the engines and the replay return them: each
check fails on the fault it names."""

from __future__ import annotations

import pytest

from vllm_kimi_eagle.fixtures import controls as ctl
from vllm_kimi_eagle.fixtures import lifted
from vllm_kimi_eagle.tools.kimi_width import lifted_verdicts as lv

TOKENS = [[5, 6, 7, 8], [9, 10, 11, 12]]
RIGHT = {ctl.EAGLE31: 3.3, ctl.NOPE: 2.9, ctl.PRUNED: 2.7}
WRONG = {name: 1.5 for name in ctl.CONTROL_NAMES}


def _result(case: lv.Case) -> dict:
    result = {"start_s": 30.0, "generate_s": 2.0, "token_ids": [list(t) for t in TOKENS],
              "memory": {"worker_anon_gib": 1.6}}
    if case.draft:
        module = "vllm_kimi_eagle.serving.draft_model" if case.draft_class == lv.PLUGIN \
            else "vllm.model_executor.models.deepseek_eagle3"
        served = WRONG[case.control] if case.control else RIGHT[case.draft]
        result.update(drafts=10, acceptance_length=served, reference_acceptance=served,
                      draft_class=f"{module}.Eagle3DeepseekV2ForCausalLM", draft_load_s=0.03,
                      accepted_per_position=[8, 6, 4])
    return result


@pytest.fixture
def run():
    cases = lv.matrix(lifted.DRAFT_NAMES, (1, 2))
    return cases, {c.name: _result(c) for c in cases}


def _failed(cases, results, dtype="float32"):
    return sorted({(c.case, c.check) for c in lv.all_checks(cases, results, dtype)
                   if not c.ok})


def test_a_right_run_passes_and_serves_every_control(run):
    cases, results = run
    assert _failed(cases, results) == []
    served = [c.control for c in cases if c.control]
    assert set(served) == set(ctl.CONTROL_NAMES)
    folders = [c.folder for c in cases if c.control and c.folder != c.draft]
    assert sorted(folders) == sorted(c.folder for c in ctl.CONTROLS if c.folder)
    # the controls at the first size only; vLLM's class on the NoPE draft is its control
    assert [c.tensor_parallel for c in cases].count(1) == 1 + 2 * len(lifted.DRAFTS) + sum(
        1 for c in ctl.CONTROLS if c.folder)
    nope = [c for c in cases if c.draft == ctl.NOPE and c.draft_class == lv.IN_TREE]
    assert all(c.control == "served_with_rope" for c in nope)


@pytest.mark.parametrize("fault, check", [
    (lambda r: r["token_ids"][0].__setitem__(2, 99), "greedy tokens as without a draft"),
    (lambda r: r.update(drafts=0), "drafts proposed"),
    (lambda r: r.update(acceptance_length=r["acceptance_length"] - 0.1),
     "acceptance as the reference replays it"),
    (lambda r: r.update(draft_class="vllm.model_executor.models.deepseek_eagle3.X"),
     "draft class"),
])
def test_each_engine_check_fails_on_its_fault(run, fault, check):
    cases, results = run
    name = f"tp2/{ctl.EAGLE31}/{lv.PLUGIN}"
    fault(results[name])
    failed = _failed(cases, results)
    assert (name, check) in failed and {case for case, _ in failed} == {name}, failed


def test_a_control_that_does_not_drop_fails(run):
    cases, results = run
    name = f"tp1/{ctl.control_named('target_lm_head').folder}"
    results[name].update(acceptance_length=3.28, reference_acceptance=3.28)
    assert _failed(cases, results) == [(name, "control drops (> 0.05)")]


def test_vllms_class_serving_a_nope_draft_as_if_rope_free_fails(run):
    """vLLM's class on the NoPE draft must show RoPE's loss, not pass as equal."""
    cases, results = run
    name = f"tp1/{ctl.NOPE}/{lv.IN_TREE}"
    results[name].update(acceptance_length=RIGHT[ctl.NOPE])
    assert _failed(cases, results) == [
        (name, "acceptance as the reference replays it"), (name, "control drops (> 0.05)")]


def test_in_bfloat16_a_control_must_drop_past_the_tolerance(run):
    cases, results = run
    name = f"tp1/{ctl.control_named('norm_skipped').folder}"
    results[name].update(acceptance_length=RIGHT[ctl.EAGLE31] - 0.1,
                         reference_acceptance=RIGHT[ctl.EAGLE31] - 0.1)
    assert _failed(cases, results, "float32") == []
    assert _failed(cases, results, "bfloat16") == [(name, "control drops (> 0.2)")]
