"""The registry of wrong servings (fixtures/wrong_servings.py): one name for one mistake in
training, the build's margins, kimi-width's controls and make faults, and each entry
served on the reference as it says."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.planted_faults import FAULTS, PLUGIN_FAULTS  # noqa: E402
from vllm_kimi_eagle.fixtures import controls, margins  # noqa: E402
from vllm_kimi_eagle.fixtures import wrong_servings as ws  # noqa: E402
from vllm_kimi_eagle.fixtures.variants import TRAINED  # noqa: E402


def test_each_name_is_one_wrong_serving_and_each_is_used():
    assert len(set(ws.NAMES)) == len(ws.NAMES)
    for serving in ws.WRONG_SERVINGS:
        assert serving.kind in ws.SERVED, serving.name
        used = serving.taught or serving.margins or serving.controls or serving.planted
        assert used, f"{serving.name} is used nowhere"


def test_every_report_names_a_serving_by_its_registry_name():
    """A margin is DRAFT:NAME, a control and a planted fault NAME; a fault of the plugin's
    own never takes a serving's name."""
    for margin in margins.MARGINS:
        if margin.serving:
            assert margin.name == f"{margin.draft}:{margin.serving.name}"
    assert set(controls.CONTROL_NAMES) <= set(ws.NAMES)
    assert [c.name for c in controls.CONTROLS] == [
        s.name for s in ws.WRONG_SERVINGS for _ in s.controls]
    planted = [f.name for f in FAULTS if f not in PLUGIN_FAULTS]
    assert planted == [s.name for s in ws.WRONG_SERVINGS if s.planted]
    assert not {f.name for f in PLUGIN_FAULTS} & set(ws.NAMES)


def test_each_promise_names_trained_drafts_and_prompt_sets():
    for serving in ws.WRONG_SERVINGS:
        for promise in serving.margins:
            assert promise.drafts and set(promise.drafts) <= set(TRAINED), serving.name
            assert set(promise.on) <= {ws.CALIBRATE, ws.SUITE, ws.COMPARE} and promise.on
        assert set(serving.controls) <= {ws.EAGLE31, ws.NOPE, ws.PRUNED}, serving.name


def test_training_takes_the_captures_in_the_registry_s_order():
    """The order the trained drafts were built with: each id one layer early then late,
    each pair swapped, every id early then late (the same weights, build after build)."""
    taught = [s.name for s in ws.WRONG_SERVINGS if s.taught and s.kind == "capture"]
    assert taught == ["first_id_early", "first_id_late", "second_id_early",
                      "second_id_late", "third_id_early", "third_id_late",
                      "first_second_swapped", "first_third_swapped",
                      "second_third_swapped", "every_id_early", "every_id_late"]


def test_a_capture_serving_that_reads_no_servable_capture_is_refused():
    late = ws.named("second_id_late")  # [3, 5, 5] for the late draft's [3, 4, 5]
    assert ws.capture_read(late, (3, 4, 5)) is None
    with pytest.raises(ValueError, match=r"second_id_late reads \[3, 5, 5\] for \[3, 4, 5\]"):
        with ws.served_wrong(late, None, None, (3, 4, 5)):
            pass
    assert ("eagle3-late", late.margins[0]) not in ws.promised(late)


def test_an_unknown_name_lists_the_registry():
    with pytest.raises(ValueError, match="first_id_early"):
        ws.named("first-capture-id-off")


@pytest.mark.parametrize("name, capture, zeroed", [
    ("first_id_early", (1, 3, 5), False), ("first_second_swapped", (3, 2, 5), False),
    ("every_id_late", (3, 4, 6), False), ("captured_states_zeroed", (2, 3, 5), True)])
def test_what_a_serving_reads(name, capture, zeroed):
    with ws.served_wrong(ws.named(name), None, None, (2, 3, 5)) as read:
        assert read.capture == capture
        assert (read.states is torch.zeros_like) == zeroed
