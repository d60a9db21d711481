"""The self-check's decisions without an engine (serving/self_check.py): the draft a plan
says must be built, each difference named with both values, the info metric's samples
(serving/plan_metric.py) and what ``status`` makes of two scrapes (tools/status.py).
Against vLLM's real classes: tests/integration/test_draft_as_built.py; in an engine:
tests/e2e/test_self_check_e2e.py."""

from __future__ import annotations

import math

import pytest

from vllm_kimi_eagle.draft.draft_config import as_record
from vllm_kimi_eagle.draft.draft_spec import draft_layout, spec_from_config
from vllm_kimi_eagle.fixtures import variants
from vllm_kimi_eagle.serving import plan_metric, self_check
from vllm_kimi_eagle.tools import status
from vllm_kimi_eagle.tools.figures.spec_metrics import Scrape


def config(**changes):
    raw = variants.draft_config(variants.DRAFT_VARIANTS[0])
    raw.update(changes)
    return as_record(raw)


def test_the_planned_softmax_scale_is_vllms_formula():
    """1/sqrt(qk head) times yarn's mscale(mscale_all_dim)^2 where rotated (the tiny
    drafts' yarn: factor 32, mscale_all_dim 1), plain where NoPE or default rope."""
    record = config()
    spec = spec_from_config(record)
    qk = (128 + 64) ** -0.5
    mscale = 0.1 * 1.0 * math.log(32.0) + 1.0
    assert self_check.softmax_scale(spec, record, rotated=True) == pytest.approx(qk * mscale ** 2)
    assert self_check.softmax_scale(spec, record, rotated=False) == pytest.approx(qk)
    plain = config(rope_scaling=None)
    assert self_check.softmax_scale(spec_from_config(plain), plain, rotated=True) == \
        pytest.approx(qk)


def test_the_plan_for_vllms_class_rotates_and_builds_both_norms():
    nested = {**config().eagle_config.model_dump(by_alias=True), "use_last_layernorm": False}
    record = config(mla_use_nope=True, eagle_config=nested)
    ours = self_check.expected_draft(spec_from_config(record, served_nope=True), record,
                                     ours=True, nope=True, rope_theta=50000.0)
    theirs = self_check.expected_draft(draft_layout(record, in_tree=True), record,
                                       ours=False, nope=True, rope_theta=50000.0)
    assert (ours["nope"], ours["rope_base"], ours["final_norm"]) == (True, None, False)
    assert (theirs["nope"], theirs["rope_base"], theirs["final_norm"]) == (False, 50000.0, True)


def test_each_difference_names_the_fact_the_plan_and_what_was_built():
    planned = {"nope": True, "rope_base": None, "softmax_scale": 0.125, "draft_vocab": 192}
    built = {"nope": False, "rope_base": 50000.0, "softmax_scale": 0.125 * (1 + 1e-9),
             "draft_vocab": 192}
    assert self_check.differences(planned, built) == [
        "nope: planned True, built False", "rope_base: planned None, built 50000.0"]


def record(differences=(), **plan):
    return {"draft": "/d", "rank": "tp0", "pid": 1, "differences": list(differences),
            "plugin_version": "0.1.0",
            "enacted": {"shortcut": True},
            "plan": {"draft_class": "plugin", "capture_ids": [2, 3, 5],
                     "convention": "input-of", "nope": False, "rope_theta": 50000.0,
                     "shortcut": True, **plan}}


def test_the_info_metric_has_one_sample_per_worker_its_value_the_verdict():
    [(labels, value)] = plan_metric.samples([record()], "0.32.0")
    assert dict(zip(plan_metric.LABELS, labels)) == {
        "draft": "/d", "worker": "tp0", "draft_class": "plugin", "capture_ids": "2,3,5",
        "convention": "input-of", "nope": "false", "rope_theta": "50000", "shortcut": "true",
        "self_check": "enacted", "plugin_version": "0.1.0", "vllm_version": "0.32.0"}
    assert value == 1.0
    [(labels, value)] = plan_metric.samples([record(["nope: planned True, built False"])],
                                            "0.32.0")
    assert value == 0.0 and "differs in 1" in labels


def scrape(drafts=0.0, accepted=(), info=None) -> Scrape:
    samples = {"vllm:num_requests_running": {(): 0.0}}
    if drafts is not None:
        samples["vllm:spec_decode_num_drafts_total"] = {(("engine", "0"),): drafts}
        samples["vllm:spec_decode_num_draft_tokens_total"] = {(("engine", "0"),): 3 * drafts}
        samples["vllm:spec_decode_num_accepted_tokens_total"] = {
            (("engine", "0"),): float(sum(accepted))}
        samples["vllm:spec_decode_num_accepted_tokens_per_pos_total"] = {
            (("engine", "0"), ("position", str(i))): float(v) for i, v in enumerate(accepted)}
    if info is not None:
        samples[plan_metric.METRIC] = {tuple(sorted(zip(plan_metric.LABELS, labels))): value
                                       for labels, value in info}
    return Scrape(samples)


def test_status_measures_the_window_and_reads_the_plan():
    info = plan_metric.samples([record()], "0.32.0")
    found = status.status(scrape(10, (8, 6, 4)), scrape(110, (88, 56, 24), info), 30.0)
    assert found["acceptance"]["acceptance_length"] == pytest.approx(1 + (80 + 50 + 20) / 100)
    assert found["acceptance"]["acceptance_by_position"] == [0.8, 0.5, 0.2]
    [row] = found["plan"]
    assert row["enacted"] and row["capture_ids"] == "2,3,5" and found["hints"] == []
    text = status.format_status(found, "http://h:1")
    assert "plugin class, capture ids [2,3,5] (input-of), RoPE, rope base 50000" in text
    assert "acceptance    2.500 over 30.0 s (100 drafts" in text


def test_status_hints_at_a_misreading_and_says_when_the_plugin_is_absent():
    found = status.status(scrape(0, (0, 0, 0)), scrape(100, (5, 1, 0)), 30.0)
    assert found["plan"] == [] and "calibrate" in found["hints"][0]
    text = status.format_status(found, "http://h:1")
    assert "plugin        not acting on a draft here" in text
    idle = status.status(scrape(5, (1, 1, 1)), scrape(5, (1, 1, 1)), 30.0)
    assert "no draft proposed in the last 30.0 s" in status.format_status(idle, "u")
    none = status.status(scrape(None), scrape(None), 30.0)
    assert "the server drafts nothing" in status.format_status(none, "u")
    with pytest.raises(status.StatusError, match="not a vLLM server"):
        status.status(Scrape(), Scrape({"python_info": {(): 1.0}}), 1.0)


def test_a_worker_that_did_not_enact_the_plan_is_a_hint():
    info = plan_metric.samples([record(["capture ids on the target: planned [2, 3, 5], "
                                        "enacted [3, 4, 6]"])], "0.32.0")
    found = status.status(scrape(0, (0, 0, 0)), scrape(100, (80, 50, 20), info), 30.0)
    assert not found["plan"][0]["enacted"]
    assert any("VLLM_KIMI_EAGLE_SELF_CHECK=warn" in hint for hint in found["hints"])
